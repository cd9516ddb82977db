// The NCCL backend for CUDA tensors (builds with DISTRL_WITH_NCCL: nccl.h and the CUDA
// runtime found under CUDA_HOME). It compiles against a CPU-only LibTorch too; tensors are
// then never on a GPU and every call is refused with a clear error.
//
// Streams: each group owns one NCCL communicator and a non-blocking CUDA stream. A call waits
// (on the GPU) for the work queued so far on the legacy default stream, which is where
// LibTorch runs unless told otherwise, then runs on the group's stream; wait() blocks the host
// until the GPU has finished it, or fails at the group's timeout (the communicator is aborted
// so no rank is left hanging in a kernel).
#include "common/config.h"
#include "transport/collectives/process_group.h"

#if DISTRL_WITH_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "transport/bootstrap/store.h"

namespace distrl::transport::detail {
namespace {

using Clock = std::chrono::steady_clock;

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw TransportError("nccl backend: " + what + ": " + cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) throw TransportError("nccl backend: " + what + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Char: return ncclInt8;
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool: return ncclUint8;
    case c10::ScalarType::Int: return ncclInt32;
    case c10::ScalarType::Long: return ncclInt64;
    case c10::ScalarType::Half: return ncclFloat16;
    case c10::ScalarType::BFloat16: return ncclBfloat16;
    case c10::ScalarType::Float: return ncclFloat32;
    case c10::ScalarType::Double: return ncclFloat64;
    default: throw ArgumentError(std::string("nccl backend: dtype ") + c10::toString(t) + " is not supported by NCCL");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Product: return ncclProd;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Avg: return ncclAvg;
  }
  return ncclSum;
}

// One communicator + stream; shared by the group and its works.
struct Comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{60000};
  ~Comm() {
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> c, cudaEvent_t done, std::string what)
      : c_(std::move(c)), done_(done), what_(std::move(what)) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  bool is_completed() override { return cudaEventQuery(done_) == cudaSuccess; }
  void wait() override {
    const auto deadline = Clock::now() + c_->timeout;
    for (;;) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) cuda_check(e, what_);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(c_->comm, &async);
      if (async != ncclSuccess) nccl_check(async, what_ + " (a peer failed)");
      if (Clock::now() > deadline) {
        ncclCommAbort(c_->comm);
        c_->comm = nullptr;
        throw TimeoutError(what_ + ": not finished after " + std::to_string(c_->timeout.count()) +
                           " ms; the communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Later work on the default stream sees the result.
    cuda_check(cudaStreamWaitEvent(nullptr, done_, 0), what_);
  }

 private:
  std::shared_ptr<Comm> c_;
  cudaEvent_t done_;
  std::string what_;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<Comm> c, int rank, int size, std::shared_ptr<void> keepalive)
      : ProcessGroup(rank, size), c_(std::move(c)), keepalive_(std::move(keepalive)) {}

  std::string backend() const override { return "nccl"; }

  // NCCL tells the peers itself: their pending operations fail once this communicator is gone.
  void abort(const std::string& reason) override {
    if (!c_->comm) return;
    DISTRL_LOG(Warn, "nccl backend: aborting the communicator: " << reason);
    ncclCommAbort(c_->comm);
    c_->comm = nullptr;
  }

  WorkPtr isend(const at::Tensor& t, int dst, int tag) override {
    check_p2p(t, dst);
    return launch("send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")", [&] {
      nccl_check(ncclSend(t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), dst, c_->comm, c_->stream), "send");
    });
  }

  WorkPtr irecv(const at::Tensor& t, int src, int tag) override {
    check_p2p(t, src);
    return launch("recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")", [&] {
      nccl_check(ncclRecv(t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), src, c_->comm, c_->stream), "recv");
    });
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    int mine = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size())
        throw ArgumentError("new_group: rank " + std::to_string(ranks[i]) + " is not in this group");
      if (ranks[i] == rank()) mine = static_cast<int>(i);
    }
    auto child = std::make_shared<Comm>();
    child->device = c_->device;
    child->timeout = c_->timeout;
    nccl_check(ncclCommSplit(c_->comm, mine < 0 ? NCCL_SPLIT_NOCOLOR : 0, mine, &child->comm, nullptr), "new_group");
    if (mine < 0) return nullptr;
    cuda_check(cudaStreamCreateWithFlags(&child->stream, cudaStreamNonBlocking), "stream");
    return std::make_shared<NcclGroup>(child, mine, static_cast<int>(ranks.size()), keepalive_);
  }

 protected:
  WorkPtr run(Call c, bool async) override {
    check_call(c);
    for (const auto& t : c.tensors)
      if (!t.is_cuda())
        throw ArgumentError(std::string("nccl backend: ") + name(c.kind) + " needs CUDA tensors, got a " +
                            describe_tensor(t) + " on " + t.device().str() + "; use the zmq backend for CPU tensors");
    if (c.single.defined() && !c.single.is_cuda())
      throw ArgumentError(std::string("nccl backend: ") + name(c.kind) +
                          " needs CUDA tensors; use the zmq backend for CPU tensors");
    const at::Tensor& ref = c.single.defined() ? c.single : (c.tensors.empty() ? c.single : c.tensors[0]);
    auto work = launch(name(c.kind), [&] { enqueue(c, ref); });
    if (!async) work->wait();
    return work;
  }

 private:
  void check_p2p(const at::Tensor& t, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank())
      throw ArgumentError("nccl backend: rank " + std::to_string(peer) + " is not another rank of this group");
    if (!t.is_cuda() || !t.is_contiguous())
      throw ArgumentError("nccl backend: point-to-point needs a contiguous CUDA tensor, got " + describe_tensor(t));
  }

  // Orders after the default stream, runs fn on the group's stream, records completion.
  template <typename F>
  WorkPtr launch(const std::string& what, F&& fn) {
    if (!c_->comm) throw TransportError("nccl backend: the communicator was aborted after an earlier failure");
    cuda_check(cudaSetDevice(c_->device), "cudaSetDevice");
    cudaEvent_t ready, done;
    cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "event");
    cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");
    cuda_check(cudaEventRecord(ready, nullptr), "event record");
    cuda_check(cudaStreamWaitEvent(c_->stream, ready, 0), "stream wait");
    cudaEventDestroy(ready);
    fn();
    cuda_check(cudaEventRecord(done, c_->stream), "event record");
    return std::make_shared<NcclWork>(c_, done, what + " on rank " + std::to_string(rank()));
  }

  void enqueue(const Call& c, const at::Tensor& ref) {
    const int n = size();
    if (c.kind == Kind::Barrier) {
      if (!barrier_buf_) cuda_check(cudaMalloc(&barrier_buf_, sizeof(float)), "barrier buffer");
      nccl_check(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, c_->comm, c_->stream), "barrier");
      return;
    }
    const auto type = nccl_type(ref.scalar_type());
    const std::size_t count = ref.numel(), bytes = count * ref.element_size();
    auto ptr = [](const at::Tensor& t) { return t.data_ptr(); };
    switch (c.kind) {
      case Kind::AllReduce:
        nccl_check(
            ncclAllReduce(ptr(c.tensors[0]), ptr(c.tensors[0]), count, type, nccl_op(c.op), c_->comm, c_->stream),
            "all_reduce");
        return;
      case Kind::Broadcast:
        nccl_check(ncclBroadcast(ptr(c.tensors[0]), ptr(c.tensors[0]), count, type, c.root, c_->comm, c_->stream),
                   "broadcast");
        return;
      case Kind::Reduce:
        nccl_check(
            ncclReduce(ptr(c.tensors[0]), ptr(c.tensors[0]), count, type, nccl_op(c.op), c.root, c_->comm, c_->stream),
            "reduce");
        return;
      case Kind::AllGather:  // each rank's input straight into the outputs
      case Kind::Gather:
        nccl_check(ncclGroupStart(), "group start");
        for (int r = 0; r < n; ++r) {
          if (c.kind == Kind::AllGather || rank() == c.root) {
            if (r == rank())
              cuda_check(cudaMemcpyAsync(ptr(c.tensors[r]), ptr(c.single), bytes, cudaMemcpyDeviceToDevice, c_->stream),
                         "copy");
            else nccl_check(ncclRecv(ptr(c.tensors[r]), count, type, r, c_->comm, c_->stream), "recv");
          }
          if (r != rank() && (c.kind == Kind::AllGather || r == c.root))
            nccl_check(ncclSend(ptr(c.single), count, type, r, c_->comm, c_->stream), "send");
        }
        nccl_check(ncclGroupEnd(), "group end");
        return;
      case Kind::Scatter:
        nccl_check(ncclGroupStart(), "group start");
        if (rank() == c.root) {
          for (int r = 0; r < n; ++r) {
            if (r == rank())
              cuda_check(cudaMemcpyAsync(ptr(c.single), ptr(c.tensors[r]), bytes, cudaMemcpyDeviceToDevice, c_->stream),
                         "copy");
            else nccl_check(ncclSend(ptr(c.tensors[r]), count, type, r, c_->comm, c_->stream), "send");
          }
        } else {
          nccl_check(ncclRecv(ptr(c.single), count, type, c.root, c_->comm, c_->stream), "recv");
        }
        nccl_check(ncclGroupEnd(), "group end");
        return;
      case Kind::ReduceScatter: {
        // NCCL wants the inputs contiguous: stage them in one device buffer.
        void* staged = nullptr;
        cuda_check(cudaMallocAsync(&staged, bytes * n, c_->stream), "staging buffer");
        for (int r = 0; r < n; ++r)
          cuda_check(cudaMemcpyAsync(static_cast<char*>(staged) + r * bytes, ptr(c.tensors[r]), bytes,
                                     cudaMemcpyDeviceToDevice, c_->stream),
                     "copy");
        nccl_check(ncclReduceScatter(staged, ptr(c.single), count, type, nccl_op(c.op), c_->comm, c_->stream),
                   "reduce_scatter");
        cuda_check(cudaFreeAsync(staged, c_->stream), "free");
        return;
      }
      case Kind::Barrier: return;
    }
  }

  std::shared_ptr<Comm> c_;
  std::shared_ptr<void> keepalive_;
  void* barrier_buf_ = nullptr;
};

}  // namespace

int check_nccl_usable() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    throw ConfigError(std::string("process group: backend nccl needs a CUDA GPU, and this machine has none (") +
                      (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + "); use backend zmq");
  return devices;
}

std::shared_ptr<ProcessGroup> make_nccl_process_group(Store& store, int rank, int world_size,
                                                      const ProcessGroupOptions& options,
                                                      std::shared_ptr<void> keepalive) {
  const int devices = check_nccl_usable();
  auto c = std::make_shared<Comm>();
  const char* local = std::getenv("LOCAL_RANK");
  c->device = (local ? std::atoi(local) : rank) % devices;
  c->timeout = options.timeout;
  cuda_check(cudaSetDevice(c->device), "cudaSetDevice");
  ncclUniqueId id;
  if (rank == 0) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    store.set("nccl/id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  }
  const std::string raw = store.get("nccl/id", options.timeout);
  if (raw.size() != sizeof(id)) throw ProtocolError("nccl backend: the unique id in the store has the wrong size");
  std::memcpy(&id, raw.data(), sizeof(id));
  nccl_check(ncclCommInitRank(&c->comm, world_size, id, rank), "ncclCommInitRank");
  cuda_check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
  return std::make_shared<NcclGroup>(c, rank, world_size, std::move(keepalive));
}

}  // namespace distrl::transport::detail

#else  // !DISTRL_WITH_NCCL

namespace distrl::transport::detail {

int check_nccl_usable() {
  throw ConfigError(
      "process group: this build has no NCCL backend (nccl.h was not found under CUDA_HOME at "
      "configure time); use backend zmq, or rebuild with -DDISTRL_NCCL=ON");
}

std::shared_ptr<ProcessGroup> make_nccl_process_group(Store&, int, int, const ProcessGroupOptions&,
                                                      std::shared_ptr<void>) {
  check_nccl_usable();
  return nullptr;
}

}  // namespace distrl::transport::detail

#endif
