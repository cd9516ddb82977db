// Collectives, like torch.distributed: point-to-point (send/recv/isend/irecv) and collective
// operations over a group of ranks, in place on tensors.
//
//   auto pg = init_process_group(ProcessGroupOptions{});  // zmq, env:// by default, like torchrun
//   at::Tensor t = at::ones({1024});
//   pg->all_reduce(t);                                  // t == world size everywhere
//   WorkPtr w = pg->all_reduce_async(t, ReduceOp::Avg); // runs on the group's own thread
//   w->wait();
//
// Every rank of a group must issue the same collectives in the same order with matching
// tensors (dtype and element count) and roots; a mismatch is detected and raises MismatchError
// on the ranks that see it, and the others fail instead of waiting (the group is aborted). Every
// operation has a deadline (ProcessGroupOptions::timeout); a rank that dies makes the others
// fail with a TransportError naming it. After any failure a group refuses further work.
//
// Thread-safe. Operations of one group run in the order they were issued; point-to-point
// messages between two ranks with the same tag arrive in the order they were sent.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/error.h"
#include "transport/runtime/future.h"

namespace distrl::transport {

class Store;

// Ranks called different collectives, or with different tensors.
class MismatchError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp { Sum, Product, Min, Max, Avg };
const char* to_string(ReduceOp op);

// The handle of an asynchronous operation. Tensors passed to it must stay untouched until
// it completes.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;
  // Waits for completion and rethrows the operation's error.
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

struct ProcessGroupOptions {
  std::string backend = "zmq";               // zmq (CPU tensors; others are staged through the CPU), nccl
  std::string init_method = "env://";        // env://, tcp://host:port, file:///path
  int rank = -1;                             // -1: from the environment
  int world_size = -1;                       // -1: from the environment
  std::chrono::milliseconds timeout{60000};  // deadline of every operation and of rendezvous
  // As RpcOptions::transport. auto/shm: when every rank runs on this host, collectives run in
  // shared memory (transport/collectives/detail/shm_collectives.h) and point-to-point calls over
  // ZeroMQ's ipc; auto falls back to ZeroMQ when shared memory cannot be set up, shm fails.
  std::string transport = "auto";
  std::string bind_host;  // zmq: tcp interface (default: the one reaching the master)
  // zmq, a world that spans hosts with more than one rank on some host: all_reduce reduces inside
  // each host (in shared memory under transport auto), all_reduces between one leader per host
  // and broadcasts inside each host, so only the leaders' traffic crosses between hosts. false:
  // one flat ring (or recursive doubling) over every rank.
  bool hierarchical = true;
  // zmq algorithm choice: all_reduce and broadcast of at most small_bytes use recursive
  // doubling / a binomial tree (fewest hops); larger ones a ring / chain pipelined in chunks.
  // In shared memory, chunk_bytes is each rank's slot (two per rank: a segment of
  // 2 * world * chunk_bytes) and all_reduce of at most small_bytes takes one barrier, not two.
  std::size_t small_bytes = 64 << 10;
  std::size_t chunk_bytes = 1 << 20;
  // zmq: the largest message a rank accepts (a larger frame closes that connection unread) and
  // sends (a larger point-to-point send, gather or scatter slot is refused with an error that
  // names this option). Collectives above small_bytes travel in chunk_bytes pieces.
  std::size_t max_message_bytes = 1ull << 30;
  // zmq: payload bytes that may wait in a rank's mailboxes, unread; a message past it is
  // dropped and counted (a peer cannot grow a rank's memory without bound). Senders run at
  // most a collective ahead, so real runs stay far below it.
  std::size_t max_queued_bytes = 2ull << 30;
  // zmq: keep large blocks on glibc's heap (mallopt: mmap threshold 256 MiB, trim threshold
  // 1 GiB, process-wide, once). Otherwise every received chunk above 128 KiB is a fresh mmap
  // whose pages fault in again, and a large all_reduce after small ones runs 2-3x slower
  // (16 MiB on 2 ranks: 18-24 ms instead of 7-8 ms). The cost: up to 1 GiB of freed heap is
  // kept by the process instead of returned to the system.
  bool tune_malloc = true;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }  // in this group
  int size() const { return size_; }
  virtual std::string backend() const = 0;
  // What the collectives travel over: "shm" (the zmq backend with every rank on this host),
  // "zmq" (its sockets), "shm+zmq" / "zmq+zmq" (hierarchical all_reduce across hosts: inside
  // each host, then between them), "nccl".
  virtual std::string transport() const { return backend(); }

  // Point to point (ranks are group ranks). The receiver's tensor must match the sender's
  // dtype and element count.
  virtual WorkPtr isend(const at::Tensor& tensor, int dst, int tag = 0) = 0;
  virtual WorkPtr irecv(const at::Tensor& tensor, int src, int tag = 0) = 0;
  void send(const at::Tensor& tensor, int dst, int tag = 0) { isend(tensor, dst, tag)->wait(); }
  void recv(const at::Tensor& tensor, int src, int tag = 0) { irecv(tensor, src, tag)->wait(); }

  // Collectives. The plain forms wait; the _async forms return at once. Tensors are
  // contiguous, and a list holds size() tensors of one dtype and element count.
  void broadcast(const at::Tensor& tensor, int root) { issue(Call::broadcast(tensor, root), false); }
  WorkPtr broadcast_async(const at::Tensor& tensor, int root) { return issue(Call::broadcast(tensor, root), true); }
  // The result lands in root's tensor; the other ranks' tensors are left as they were.
  void reduce(const at::Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum) {
    issue(Call::reduce(tensor, root, op), false);
  }
  WorkPtr reduce_async(const at::Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum) {
    return issue(Call::reduce(tensor, root, op), true);
  }
  void all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) { issue(Call::all_reduce(tensor, op), false); }
  WorkPtr all_reduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum) {
    return issue(Call::all_reduce(tensor, op), true);
  }
  // outputs[i] receives rank i's input.
  void all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
    issue(Call::all_gather(outputs, input), false);
  }
  WorkPtr all_gather_async(const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
    return issue(Call::all_gather(outputs, input), true);
  }
  // On root, outputs[i] receives rank i's input; other ranks pass an empty list.
  void gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input, int root) {
    issue(Call::gather(outputs, input, root), false);
  }
  // Rank i's output receives root's inputs[i]; other ranks pass an empty list.
  void scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, int root) {
    issue(Call::scatter(output, inputs, root), false);
  }
  // output = op over ranks of inputs[rank()].
  void reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op = ReduceOp::Sum) {
    issue(Call::reduce_scatter(output, inputs, op), false);
  }
  WorkPtr reduce_scatter_async(const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                               ReduceOp op = ReduceOp::Sum) {
    return issue(Call::reduce_scatter(output, inputs, op), true);
  }
  void barrier() { issue(Call::barrier(), false); }

  // Fails this group on every member: their waiting and later operations (point-to-point too)
  // throw an error naming this rank and `reason`; this rank's later collectives refuse. For a
  // failure the others cannot see (a pipeline stage whose neighbour died, say). Best effort,
  // never blocks.
  virtual void abort(const std::string& reason) = 0;

  // Collectives this rank has issued on this group so far (all kinds, sync and async), like
  // torch's sequence number. Point-to-point calls are not counted: it cannot tell that nothing
  // was sent.
  std::uint64_t collectives_issued() const { return issued_.load(); }

  // A group of some of this group's ranks (in the given order: ranks[i] becomes rank i).
  // Every rank of this group must call it, in the same order; ranks not in the list get
  // nullptr, like torch's GROUP_NON_MEMBER.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

  // One collective, as the backends see it.
  enum class Kind { Broadcast, Reduce, AllReduce, AllGather, Gather, Scatter, ReduceScatter, Barrier };
  static const char* name(Kind k);  // "all_reduce"
  struct Call {
    Kind kind = Kind::Barrier;
    std::vector<at::Tensor> tensors;  // broadcast/reduce/all_reduce: [t]; others: the list
    at::Tensor single;                // all_gather/gather: input; scatter/reduce_scatter: output
    int root = 0;
    ReduceOp op = ReduceOp::Sum;

    static Call broadcast(const at::Tensor& t, int root) { return {Kind::Broadcast, {t}, {}, root}; }
    static Call reduce(const at::Tensor& t, int root, ReduceOp op) { return {Kind::Reduce, {t}, {}, root, op}; }
    static Call all_reduce(const at::Tensor& t, ReduceOp op) { return {Kind::AllReduce, {t}, {}, 0, op}; }
    static Call all_gather(const std::vector<at::Tensor>& out, const at::Tensor& in) {
      return {Kind::AllGather, out, in};
    }
    static Call gather(const std::vector<at::Tensor>& out, const at::Tensor& in, int root) {
      return {Kind::Gather, out, in, root};
    }
    static Call scatter(const at::Tensor& out, const std::vector<at::Tensor>& in, int root) {
      return {Kind::Scatter, in, out, root};
    }
    static Call reduce_scatter(const at::Tensor& out, const std::vector<at::Tensor>& in, ReduceOp op) {
      return {Kind::ReduceScatter, in, out, 0, op};
    }
    static Call barrier() { return {}; }
  };

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  // Checks the call (throws ArgumentError naming what is wrong), then runs it: async returns at once, otherwise the call has finished when run() returns.
  virtual WorkPtr run(Call call, bool async) = 0;
  // The checks every backend shares: ranks, list lengths, dtypes, sizes, contiguity.
  void check_call(const Call& call) const;

 private:
  WorkPtr issue(Call call, bool async) {
    issued_.fetch_add(1);
    return run(std::move(call), async);
  }

  int rank_;
  int size_;
  std::atomic<std::uint64_t> issued_{0};
};

// Joins the world by options.init_method (rank 0 hosts the rendezvous store) and returns the
// group of all ranks. Throws ConfigError for bad options or an unknown backend (nccl needs a
// build with DISTRL_NCCL and a CUDA LibTorch), TimeoutError when ranks miss the rendezvous.
std::shared_ptr<ProcessGroup> init_process_group(const ProcessGroupOptions& options);

// The ZeroMQ backend on an existing store (e.g. one shared with an RpcAgent); `prefix`
// separates several worlds on one store.
std::shared_ptr<ProcessGroup> make_zmq_process_group(Store& store, int rank, int world_size,
                                                     const ProcessGroupOptions& options,
                                                     const std::string& prefix = "pg");

// "float32[1024]" — for messages.
std::string describe_tensor(const at::Tensor& t);

}  // namespace distrl::transport
