// The ZeroMQ process group: collectives executed by the calling thread (sync, when the group
// is idle) or the group's own thread (async), over the sockets of a Mesh.
//
// Algorithms (n ranks, r this rank):
// - all_reduce, small (<= small_bytes, or fewer elements than ranks): recursive doubling; with
//   n not a power of two, the first 2*(n - p) ranks pair up first and the odd ones stand in.
// - all_reduce, large: ring reduce-scatter then all-gather over n segments, each cut into
//   chunks of chunk_bytes; a chunk is forwarded as soon as it is reduced, so receiving,
//   reducing and sending overlap. Step k sends segment r-k-1 and receives segment r-k-2.
// - reduce_scatter / all_gather: the first / second half of that ring.
// - broadcast: binomial tree (small) or a chunked chain (large); reduce: binomial tree;
//   gather / scatter: direct; barrier: recursive doubling on one byte. Rooted
//   collectives first pass each rank's root to the next rank (agree_on_root).
// Every rank computes each reduced value once (ring) or with commuting operands (recursive
// doubling), so all ranks end with the same bits.
//
// A world that spans hosts, with more than one rank on some host, runs all_reduce in three
// steps, as NCCL and Horovod do (Hierarchy): reduce inside each host (in shared memory under
// transport auto: one segment per host, made by the host's leader), all_reduce between one
// leader per host (its lowest rank) over the sockets, broadcast inside each host. Only the
// leaders' traffic crosses between hosts. The other collectives stay flat.
#include <algorithm>
#include <cstring>
#include <map>
#include <thread>

#include "common/log.h"
#include "common/malloc_tuning.h"
#include "transport/collectives/detail/algorithms.h"
#include "transport/collectives/detail/reduce_ops.h"
#include "transport/collectives/detail/shm_collectives.h"
#include "transport/collectives/detail/works.h"
#include "transport/link/endpoints.h"

#include <ATen/ops/full.h>

#include <mutex>

#include "transport/wire/detail/tensor_wire.h"
#include "transport/wire/detail/wire_codec.h"
#include "common/thread_name.h"

namespace distrl::transport::detail {
namespace {

using Kind = ProcessGroup::Kind;

std::string error_type(const std::exception& e) {
  if (dynamic_cast<const MismatchError*>(&e)) return "MismatchError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  return "TransportError";
}

// The groups a hierarchical all_reduce runs on (subgroups of the world group, made by every rank
// in the same order): this host's ranks, its leader first; the leaders of all hosts (null on a
// rank that leads none).
struct Hierarchy {
  std::shared_ptr<ProcessGroup> local, leaders;
};

class ZmqGroup final : public ProcessGroup {
 public:
  ZmqGroup(std::shared_ptr<Mesh> mesh, std::uint32_t id, std::vector<int> members, int my_index,
           std::shared_ptr<void> keepalive)
      : ProcessGroup(my_index, static_cast<int>(members.size())), mesh_(std::move(mesh)), id_(id),
        members_(std::move(members)), keepalive_(std::move(keepalive)) {}

  ~ZmqGroup() override {
    std::deque<Task> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      left.swap(queue_);
      cv_.notify_all();
    }
    for (auto& t : left)
      t.done.set_error(std::make_exception_ptr(TransportError("process group destroyed with this operation queued")));
    if (worker_.joinable()) worker_.join();
  }

  std::string backend() const override { return "zmq"; }
  // "shm", "zmq", or "<local>+zmq" for a hierarchical all_reduce (its inside-host part first).
  std::string transport() const override {
    if (hier_) return hier_->local->transport() + "+zmq";
    return shm_ ? "shm" : "zmq";
  }

  // Collectives from now on run in shared memory (every rank of the group switches together,
  // before the first collective is issued).
  void use_shared_memory(std::unique_ptr<ShmCollectives> shm) { shm_ = std::move(shm); }
  // all_reduce from now on runs hierarchically (every rank switches together, before the first
  // collective is issued).
  void use_hierarchy(std::unique_ptr<Hierarchy> h) { hier_ = std::move(h); }

  WorkPtr isend(const at::Tensor& tensor, int dst, int tag) override {
    check_p2p(tensor, dst, tag, "isend to");
    const at::Tensor t = tensor.is_cpu() ? tensor : tensor.to(c10::kCPU);
    PgHeader h = p2p_header(t, tag);
    auto tracker = std::make_shared<SendTracker>();
    const std::string what = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
    mesh_->send(members_[dst], h, t.data_ptr(), t.numel() * t.element_size(), std::make_shared<at::Tensor>(t), tracker);
    return std::make_shared<SendWork>(tracker, Clock::now() + mesh_->options().timeout, what);
  }

  WorkPtr irecv(const at::Tensor& tensor, int src, int tag) override {
    check_p2p(tensor, src, tag, "irecv from");
    at::Tensor staged = tensor.is_cpu() ? at::Tensor() : tensor.to(c10::kCPU);
    return std::make_shared<RecvWork>(mesh_, id_, members_[src], tag, tensor, staged,
                                      Clock::now() + mesh_->options().timeout,
                                      "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")");
  }

  void abort(const std::string& reason) override { abort_as("TransportError", reason); }

  // abort() with the error type the members raise (MismatchError, TimeoutError, TransportError).
  void abort_as(const std::string& type, const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.empty()) broken_ = "aborted here: " + reason;
    }
    if (shm_) shm_->abort(type, reason);
    abort_hierarchy(type, reason);
    mesh_->send_abort(id_, members_, type, reason);
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    std::vector<bool> seen(size(), false);
    if (ranks.empty()) throw ArgumentError("new_group: the rank list is empty");
    int mine = -1;
    std::vector<int> members;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const int r = ranks[i];
      if (r < 0 || r >= size())
        throw ArgumentError("new_group: rank " + std::to_string(r) + " is not in this group of " +
                            std::to_string(size()));
      if (seen[r]) throw ArgumentError("new_group: rank " + std::to_string(r) + " is listed twice");
      seen[r] = true;
      if (r == rank()) mine = static_cast<int>(i);
      members.push_back(members_[r]);
    }
    const std::uint32_t child = ++children_;  // every member calls new_group in the same order
    const std::uint32_t id = (id_ * 0x9E3779B1u) ^ (child * 0x85EBCA77u) ^ 0x5bd1e995u;
    if (mine < 0) return nullptr;
    return std::make_shared<ZmqGroup>(mesh_, id, std::move(members), mine, keepalive_);
  }

 protected:
  WorkPtr run(Call call, bool async) override {
    check_call(call);
    Task task{std::move(call), Promise<void>()};
    std::unique_lock<std::mutex> lock(mu_);
    if (!broken_.empty())
      throw TransportError("process group: unusable after an earlier failure (" + broken_ + "); create a new one");
    if (!async && queue_.empty() && !busy_) {  // run it here: no thread hand-off
      busy_ = true;
      lock.unlock();
      try {
        execute(task.call);
      } catch (...) {
        idle();
        throw;
      }
      idle();
      return nullptr;
    }
    Future<void> f = task.done.get_future();
    if (!worker_.joinable())
      worker_ = std::thread([this] {
        name_this_thread("distrl-group");
        work();
      });
    queue_.push_back(std::move(task));
    cv_.notify_all();
    lock.unlock();
    if (!async) {
      f.value();
      return nullptr;
    }
    return std::make_shared<FutureWork>(std::move(f));
  }

 private:
  struct Task {
    Call call;
    Promise<void> done;
  };

  void idle() {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    cv_.notify_all();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !busy_); });
      if (stop_) return;
      Task t = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      try {
        execute(t.call);
        t.done.set_value();
      } catch (...) {
        t.done.set_error(std::current_exception());
      }
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }

  void check_p2p(const at::Tensor& t, int peer, int tag, const char* what) const {
    const std::string where = std::string(what) + " rank " + std::to_string(peer) + ": ";
    if (peer < 0 || peer >= size() || peer == rank())
      throw ArgumentError(where + "not another rank of this group of " + std::to_string(size()) + " (this is rank " +
                          std::to_string(rank()) + ")");
    if (tag < 0) throw ArgumentError(where + "tags must be >= 0");
    if (!t.defined()) throw ArgumentError(where + "the tensor is undefined");
    if (!t.is_contiguous()) throw ArgumentError(where + describe_tensor(t) + " is not contiguous");
    dtype_code(t.scalar_type());  // throws for dtypes the wire cannot carry
  }

  // This rank as errors name it: its world rank, and in a subgroup which member it is there (a
  // subgroup's collectives are numbered on their own: "reduce #3 on rank 2 (rank 0 of the group
  // of ranks 2-3)").
  std::string who() const {
    const std::string world = "rank " + std::to_string(mesh_->rank());
    if (id_ == 0) return world;
    return world + " (rank " + std::to_string(rank()) + " of the group of ranks " + rank_ranges(members_) + ")";
  }

  PgHeader p2p_header(const at::Tensor& t, int tag) const {
    PgHeader h;
    h.magic = kPgMagic;
    h.coll = kP2P;
    h.dtype = dtype_code(t.scalar_type());
    h.src = mesh_->rank();
    h.group = id_;
    h.tag = tag;
    h.numel = t.numel();
    return h;
  }

  // Runs one collective; only one thread at a time (busy_).
  void execute(Call& c) {
    const std::uint64_t seq = ++seq_;
    // CUDA and other device tensors go through CPU copies.
    std::vector<std::pair<at::Tensor, at::Tensor>> staged;
    auto stage = [&](at::Tensor& t) {
      if (t.defined() && !t.is_cpu()) {
        at::Tensor cpu = t.to(c10::kCPU);
        staged.emplace_back(t, cpu);
        t = cpu;
      }
    };
    for (auto& t : c.tensors) stage(t);
    stage(c.single);

    const at::Tensor& ref = c.kind == Kind::Barrier ? c.single : (c.single.defined() ? c.single : c.tensors[0]);
    Exec e(*mesh_, members_);
    e.me = rank();
    e.n = size();
    e.h.magic = kPgMagic;
    e.h.kind = static_cast<std::uint8_t>(PgKind::Data);
    e.h.coll = static_cast<std::uint8_t>(c.kind);
    e.h.src = mesh_->rank();
    e.h.group = id_;
    e.h.tag = -1;
    e.h.seq = seq;
    e.h.root = is_rooted(c.kind) ? c.root : 0;
    e.op = c.op;
    e.h.op = static_cast<std::uint8_t>(c.op);
    if (ref.defined()) {
      e.type = ref.scalar_type();
      e.esize = ref.element_size();
      e.h.dtype = dtype_code(e.type);
      e.h.numel = ref.numel();
    } else {  // barrier
      e.h.dtype = dtype_code(c10::ScalarType::Byte);
      e.h.numel = 1;
    }
    auto keep = std::make_shared<std::vector<at::Tensor>>(c.tensors);
    keep->push_back(c.single);
    e.what = std::string(name(c.kind)) + " #" + std::to_string(seq) + " on " + who();
    e.deadline = Clock::now() + mesh_->options().timeout;
    try {
      dispatch(e, c, keep);
    } catch (const std::exception& ex) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (broken_.empty()) broken_ = ex.what();
      }
      // This rank's subgroups learn it either way: after a member's abort too, a rank of this
      // host may wait in them for this one, and would otherwise see it only as gone once it exits.
      abort_hierarchy(error_type(ex), ex.what());
      if (std::string(ex.what()).find("the group was aborted by rank") == std::string::npos) {
        if (shm_) shm_->abort(error_type(ex), ex.what());
        mesh_->send_abort(id_, members_, error_type(ex), ex.what(), e.h.seq);
      }
      throw;
    }
    for (auto& [orig, cpu] : staged) orig.copy_(cpu);
  }

  void dispatch(Exec& e, Call& c, std::shared_ptr<std::vector<at::Tensor>> keep) {
    const auto& o = mesh_->options();
    const int n = size(), r = rank();
    const std::int64_t numel = e.h.numel;
    const std::size_t bytes = numel * e.esize;
    e.keep = keep;
    if (hier_ && c.kind == Kind::AllReduce && numel > 0) return hierarchical_all_reduce(e, c.tensors[0]);
    if (shm_) return shm_->run(c, e.h.seq, e.deadline, e.what);
    if (is_rooted(c.kind) && n > 1) agree_on_root(e);
    switch (c.kind) {
      case Kind::Barrier: {
        std::uint8_t b = 0;
        if (n > 1) all_reduce_small(e, reinterpret_cast<char*>(&b), 1);
        return;
      }
      case Kind::AllReduce: {
        char* buf = data(c.tensors[0]);
        if (n == 1 || numel == 0) return;
        if (bytes <= o.small_bytes || numel < n) return all_reduce_small(e, buf, numel);
        std::vector<char*> seg;
        std::vector<std::int64_t> len;
        split(buf, numel, e.esize, n, &seg, &len);
        return ring(e, seg, len, 0, 2 * n - 2, o.chunk_bytes);
      }
      case Kind::Broadcast:
        if (n == 1 || numel == 0) return;
        return run_broadcast(e, data(c.tensors[0]), numel, c.root, o.small_bytes, o.chunk_bytes);
      case Kind::Reduce: {
        if (n == 1 || numel == 0) return;
        at::Tensor work = r == c.root ? c.tensors[0] : c.tensors[0].clone();
        keep->push_back(work);
        return run_reduce(e, data(work), numel, c.root);
      }
      case Kind::AllGather: {
        c.tensors[r].copy_(c.single);
        if (n == 1 || numel == 0) return;
        std::vector<char*> seg;
        for (auto& t : c.tensors) seg.push_back(data(t));
        return ring(e, seg, std::vector<std::int64_t>(n, numel), n - 1, 2 * n - 2, o.chunk_bytes);
      }
      case Kind::ReduceScatter: {
        if (n == 1 || numel == 0) {
          if (n == 1) c.single.copy_(c.tensors[0]);
          return;
        }
        std::vector<at::Tensor> copies;
        std::vector<char*> seg;
        for (auto& t : c.tensors) {
          copies.push_back(t.clone());
          seg.push_back(data(copies.back()));
        }
        keep->insert(keep->end(), copies.begin(), copies.end());
        ring(e, seg, std::vector<std::int64_t>(n, numel), 0, n - 1, o.chunk_bytes);
        std::memcpy(data(c.single), seg[r], bytes);
        return;
      }
      case Kind::Gather:
        if (r != c.root) {
          if (numel > 0) e.send(c.root, 0, 0, data(c.single), bytes);
        } else {
          c.tensors[r].copy_(c.single);
          for (int i = 0; i < n; ++i)
            if (i != r && numel > 0) std::memcpy(data(c.tensors[i]), e.recv(i, 0, 0, bytes).payload.data(), bytes);
        }
        return e.finish_sends();
      case Kind::Scatter:
        if (r == c.root) {
          for (int i = 0; i < n; ++i)
            if (i != r && numel > 0) e.send(i, 0, 0, data(c.tensors[i]), bytes);
          c.single.copy_(c.tensors[r]);
        } else if (numel > 0) {
          std::memcpy(data(c.single), e.recv(c.root, 0, 0, bytes).payload.data(), bytes);
        }
        return e.finish_sends();
    }
  }

  // Reduce inside this host to its leader, all_reduce between the leaders, broadcast inside this
  // host. Avg sums throughout and divides at the end (hosts may hold different rank counts).
  // Any failure, a subgroup's abort included, aborts both subgroups and the world group here: a
  // leader that learns of a death on its host (or of another leader's failure) wakes the other
  // leaders, and they their hosts, so nobody waits out the timeout.
  void hierarchical_all_reduce(Exec& e, at::Tensor& t) {
    const ReduceOp op = e.op == ReduceOp::Avg ? ReduceOp::Sum : e.op;
    ProcessGroup& local = *hier_->local;
    // A member that runs a flat collective at this number sends this group a message the steps
    // below never read: its arrival fails them at once, as a mismatch (it waited out the timeout).
    mesh_->watch_collective(id_, e.h.seq, [this, what = e.what](const PgHeader& h) {
      const std::string reason = "rank " + std::to_string(h.src) + " runs " + describe(h) + " where " + what +
                                 " runs all_reduce (hierarchical): every rank must call the same collectives in the "
                                 "same order";
      for (ProcessGroup* g : {hier_->local.get(), hier_->leaders.get()})
        if (g) static_cast<ZmqGroup*>(g)->fail_locally("MismatchError", reason);
    });
    struct Unwatch {
      Mesh& mesh;
      ~Unwatch() { mesh.unwatch_collective(); }
    } unwatch{*mesh_};
    try {
      if (local.size() > 1) local.reduce(t, 0, op);
      if (hier_->leaders) hier_->leaders->all_reduce(t, op);
      if (local.size() > 1) local.broadcast(t, 0);
    } catch (const std::exception& ex) {
      // Named as the caller's all_reduce, with the step that failed after it (its own numbering).
      const std::string why = e.what + " (hierarchical) failed: " + ex.what();
      abort_hierarchy(error_type(ex), why);
      mesh_->send_abort(id_, members_, error_type(ex), why, e.h.seq);
      if (dynamic_cast<const MismatchError*>(&ex)) throw MismatchError(why);
      if (dynamic_cast<const TimeoutError*>(&ex)) throw TimeoutError(why);
      if (dynamic_cast<const TransportError*>(&ex)) throw TransportError(why);
      throw;
    }
    if (e.op == ReduceOp::Avg) divide(e.type, data(t), static_cast<std::size_t>(t.numel()), size());
  }

  // Fails this rank's waits in this group (its shared-memory segment's, on every rank of it)
  // with `type` and `reason`, sending nothing: safe on a link's I/O thread.
  void fail_locally(const std::string& type, const std::string& reason) {
    if (shm_) shm_->abort(type, reason);
    mesh_->fail_locally(id_, type, reason);
  }

  void abort_hierarchy(const std::string& type, const std::string& reason) {
    if (!hier_) return;
    static_cast<ZmqGroup&>(*hier_->local).abort_as(type, reason);
    if (hier_->leaders) static_cast<ZmqGroup&>(*hier_->leaders).abort_as(type, reason);
  }

  std::shared_ptr<Mesh> mesh_;
  std::uint32_t id_;
  std::vector<int> members_;
  std::shared_ptr<void> keepalive_;
  std::unique_ptr<ShmCollectives> shm_;  // set before the first collective; the executing thread uses it
  std::unique_ptr<Hierarchy> hier_;      // likewise
  std::uint64_t seq_ = 0;                // the executing thread only
  std::uint32_t children_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::string broken_;
  std::thread worker_;
};

// Hands the segment of the group's rank 0 (`shm` there; `address` where the others fetch it) to
// every rank; the group switches to it only if every rank mapped it (agreed over the sockets),
// else stays on ZeroMQ (transport auto) or fails (shm).
void attach_shared_memory(ZmqGroup& pg, Mesh& mesh, std::unique_ptr<ShmCollectives> shm, const std::string& address,
                          Transport transport) {
  const auto timeout = std::min<std::chrono::milliseconds>(mesh.options().timeout, std::chrono::seconds(10));
  const auto deadline = Clock::now() + timeout;
  std::string why;
  try {
    if (pg.rank() == 0) shm->admit_members(deadline);
    else shm = ShmCollectives::join(address, pg.rank(), pg.size(), mesh.options(), deadline);
  } catch (const std::exception& e) {
    why = e.what();
    shm.reset();
  }
  at::Tensor ok = at::full({1}, shm ? 1 : 0, at::kInt);
  pg.all_reduce(ok, ReduceOp::Min);
  if (ok.item<int>() == 1) return pg.use_shared_memory(std::move(shm));
  const std::string reason = why.empty() ? "another rank could not map the shared memory" : why;
  if (transport == Transport::Shm) throw TransportError("process group: transport shm: " + reason);
  DISTRL_LOG(Info, "process group: collectives over ZeroMQ (shared memory failed: " << reason << ")");
}

// A world that spans hosts with more than one rank on some host: the subgroups of a hierarchical
// all_reduce, each host's in shared memory under transport auto (its leader makes the segment
// and publishes its address in the store under `prefix`/host<leader>/shm).
void attach_hierarchy(ZmqGroup& pg, Mesh& mesh, Store& store, const std::string& prefix) {
  std::vector<std::vector<int>> hosts;  // ranks per host, hosts in order of their lowest rank
  std::map<std::string, std::size_t> index;
  for (int r = 0; r < pg.size(); ++r) {
    auto [it, fresh] = index.emplace(mesh.host_ids()[r], hosts.size());
    if (fresh) hosts.emplace_back();
    hosts[it->second].push_back(r);
  }
  if (hosts.size() < 2 || hosts.size() == static_cast<std::size_t>(pg.size())) return;
  auto h = std::make_unique<Hierarchy>();
  std::vector<int> leaders;
  std::vector<int> mine;
  for (const auto& ranks : hosts) {
    leaders.push_back(ranks.front());
    if (auto g = pg.new_group(ranks)) {
      h->local = std::move(g);
      mine = ranks;
    }
  }
  h->leaders = pg.new_group(leaders);
  auto& local = static_cast<ZmqGroup&>(*h->local);
  // Shared memory inside this host when every rank of it offered it (what they published: the
  // same answer on each of them, whatever each was told).
  bool offered = true;
  for (int r : mine) offered = offered && mesh.shm_offered()[r];
  if (local.size() > 1 && offered) {
    const std::string key = prefix + "/host" + std::to_string(mine.front()) + "/shm";
    std::unique_ptr<ShmCollectives> shm;
    std::string address, why;
    if (local.rank() == 0) {
      shm = ShmCollectives::host(local.size(), mesh.options(), &why);
      store.set(key, shm ? shm->address() : "");
      if (!shm)
        DISTRL_LOG(Info, "process group: this host's part of all_reduce over ZeroMQ (no shared memory: " << why << ")");
    } else {
      address = store.get(key, mesh.options().timeout);
    }
    if (local.rank() == 0 ? shm != nullptr : !address.empty())
      attach_shared_memory(local, mesh, std::move(shm), address, Transport::Auto);
    else  // the leader offers none: every member of the host learns it the same way
      local.barrier();
  }
  std::string sizes;
  for (const auto& ranks : hosts) sizes += (sizes.empty() ? "" : ", ") + std::to_string(ranks.size());
  DISTRL_LOG(Info, "process group: rank " << pg.rank() << ": all_reduce across " << hosts.size() << " hosts (" << sizes
                                          << " ranks): inside this host (ranks " << rank_ranges(mine) << ") over "
                                          << (local.transport() == "shm" ? "shared memory" : "ZeroMQ")
                                          << ", between the host leaders (ranks " << rank_ranges(leaders)
                                          << ") over ZeroMQ");
  pg.use_hierarchy(std::move(h));
}

}  // namespace

std::shared_ptr<ProcessGroup> make_zmq_process_group(Store& store, int rank, int world_size,
                                                     const ProcessGroupOptions& options, const std::string& prefix,
                                                     std::shared_ptr<void> keepalive) {
  if (rank < 0 || world_size < 1 || rank >= world_size)
    throw ConfigError("process group: rank " + std::to_string(rank) + " of world size " + std::to_string(world_size) +
                      " is not valid");
  if (options.chunk_bytes < 1024) throw ConfigError("process group: chunk_bytes must be at least 1024");
  if (options.max_message_bytes < std::max(options.chunk_bytes, options.small_bytes))
    throw ConfigError("process group: max_message_bytes must be at least chunk_bytes and small_bytes");
  if (options.tune_malloc) keep_large_blocks_on_heap();
  // Shared-memory collectives when every rank is on this host: rank 0 makes the segment before
  // the address exchange and offers it there; the others say they would use it.
  const Transport transport = parse_transport(options.transport, "process group");
  std::unique_ptr<ShmCollectives> shm;
  std::string offer;
  if (world_size > 1 && (transport == Transport::Auto || transport == Transport::Shm)) {
    offer = "shm";
    if (rank == 0) {
      std::string why;
      shm = ShmCollectives::host(world_size, options, &why);
      // Without it rank 0 offers nothing: under shm every rank then refuses at the exchange
      // (rather than waiting for a rank 0 that gave up before it); under auto all use ZeroMQ.
      if (!shm && transport == Transport::Shm)
        DISTRL_LOG(Error, "process group: transport shm: no shared memory (" << why << ")");
      if (!shm && transport != Transport::Shm)
        DISTRL_LOG(Info, "process group: collectives over ZeroMQ (no shared memory: " << why << ")");
      offer = shm ? shm->address() : "";
    }
  }
  auto mesh = std::make_shared<Mesh>(store, prefix, rank, world_size, options, offer);
  std::vector<int> members(world_size);
  for (int r = 0; r < world_size; ++r) members[r] = r;
  auto pg = std::make_shared<ZmqGroup>(mesh, 0, std::move(members), rank, std::move(keepalive));
  pg->barrier();  // every rank reachable before the first real collective
  if (mesh->shm_world()) attach_shared_memory(*pg, *mesh, std::move(shm), mesh->shm_address(), transport);
  else if (options.hierarchical && world_size > 1) attach_hierarchy(*pg, *mesh, store, prefix);
  return pg;
}

}  // namespace distrl::transport::detail
