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
//   gather / scatter: direct; barrier: recursive doubling on one byte.
// Every rank computes each reduced value once (ring) or with commuting operands (recursive
// doubling), so all ranks end with the same bits.
#include <algorithm>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "transport/detail/pg_mesh.h"
#include "transport/detail/reduce_ops.h"
#include "transport/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

using Kind = ProcessGroup::Kind;

int mod(int x, int n) { return ((x % n) + n) % n; }

std::string error_type(const std::exception& e) {
  if (dynamic_cast<const MismatchError*>(&e)) return "MismatchError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  return "TransportError";
}

std::string describe(const PgHeader& h) {
  if (h.coll == kP2P) return "a point-to-point message";
  std::string s = std::string(ProcessGroup::name(static_cast<Kind>(h.coll))) + " #" + std::to_string(h.seq) + " of " +
                  dtype_name(h.dtype) + "[" + std::to_string(h.numel) + "]";
  const auto k = static_cast<Kind>(h.coll);
  if (k == Kind::Reduce || k == Kind::AllReduce || k == Kind::ReduceScatter)
    s += std::string(" (") + to_string(static_cast<ReduceOp>(h.op)) + ")";
  if (k == Kind::Broadcast || k == Kind::Reduce || k == Kind::Gather || k == Kind::Scatter)
    s += " root " + std::to_string(h.root);
  return s;
}

// One collective as it runs: the expected header, the peers, the deadline.
struct Exec {
  Exec(Mesh& m, const std::vector<int>& group_members) : mesh(m), members(group_members) {}
  Mesh& mesh;
  const std::vector<int>& members;  // group rank -> global rank
  int me = 0, n = 1;
  PgHeader h;                       // step/chunk filled per message
  c10::ScalarType type = c10::ScalarType::Byte;
  ReduceOp op = ReduceOp::Sum;
  std::size_t esize = 1;
  Clock::time_point deadline;
  std::shared_ptr<SendTracker> tracker = std::make_shared<SendTracker>();
  std::shared_ptr<const void> keep;  // the tensors zero-copy sends point into
  std::string what;

  void send(int to, std::uint32_t step, std::uint32_t chunk, const void* p, std::size_t bytes, bool zero_copy = true) {
    PgHeader m = h;
    m.step = step;
    m.chunk = chunk;
    mesh.send(members[to], m, p, bytes, keep, zero_copy ? tracker : nullptr);
  }

  PgMessage recv(int from, std::uint32_t step, std::uint32_t chunk, std::size_t bytes) {
    PgMessage m = mesh.recv(h.group, members[from], -1, deadline, what);
    const auto k = static_cast<Kind>(h.coll);
    const bool reduces = k == Kind::Reduce || k == Kind::AllReduce || k == Kind::ReduceScatter;
    if (m.h.coll != h.coll || m.h.seq != h.seq || m.h.dtype != h.dtype || m.h.numel != h.numel ||
        m.h.root != h.root || (reduces && m.h.op != h.op))
      throw MismatchError(what + ": rank " + std::to_string(from) + " called " + describe(m.h) + " but this rank " +
                          describe(h) + "; every rank must issue the same collectives in the same order, with "
                          "tensors of one dtype and size");
    if (m.h.step != step || m.h.chunk != chunk || m.payload.size() != bytes)
      throw ProtocolError(what + ": rank " + std::to_string(from) + " sent step " + std::to_string(m.h.step) + "/" +
                          std::to_string(m.h.chunk) + " of " + std::to_string(m.payload.size()) + " bytes, expected " +
                          std::to_string(step) + "/" + std::to_string(chunk) + " of " + std::to_string(bytes));
    return m;
  }

  void finish_sends() {
    if (!tracker->wait_idle(deadline))
      throw TimeoutError(what + ": ZeroMQ did not finish sending before the deadline (a peer stopped reading?)");
  }
};

void reduce_msg(Exec& e, char* dst, const PgMessage& m, std::int64_t count) {
  reduce_into(e.op, e.type, dst, m.payload.data(), static_cast<std::size_t>(count));
}

// Recursive doubling on a whole buffer; sends copy (the buffer changes after each send).
void all_reduce_small(Exec& e, char* buf, std::int64_t numel) {
  const std::size_t bytes = static_cast<std::size_t>(numel) * e.esize;
  const int n = e.n, r = e.me;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  constexpr std::uint32_t kFinal = 0xffff;
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {  // stand aside: hand the data to r+1, get the result back
      e.send(r + 1, 0, 0, buf, bytes, false);
      auto m = e.recv(r + 1, kFinal, 0, bytes);
      std::memcpy(buf, m.payload.data(), bytes);
      return;
    }
    reduce_msg(e, buf, e.recv(r - 1, 0, 0, bytes), numel);
    vr = r / 2;
  } else {
    vr = r - rem;
  }
  std::uint32_t step = 1;
  for (int mask = 1; mask < p; mask <<= 1, ++step) {
    const int pv = vr ^ mask;
    const int partner = pv < rem ? pv * 2 + 1 : pv + rem;
    e.send(partner, step, 0, buf, bytes, false);
    reduce_msg(e, buf, e.recv(partner, step, 0, bytes), numel);
  }
  if (e.op == ReduceOp::Avg) divide(e.type, buf, static_cast<std::size_t>(numel), n);
  if (r < 2 * rem) e.send(r - 1, kFinal, 0, buf, bytes, false);
}

// The ring over n segments, steps [k0, k1): steps 0..n-2 reduce-scatter (rank r ends with
// segment r reduced), steps n-1..2n-3 all-gather.
void ring(Exec& e, const std::vector<char*>& seg, const std::vector<std::int64_t>& len, int k0, int k1,
          std::size_t chunk_bytes) {
  const int n = e.n, r = e.me, next = mod(r + 1, n), prev = mod(r - 1, n);
  const std::int64_t chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(chunk_bytes / e.esize));
  auto for_chunks = [&](int s, auto&& f) {
    std::uint32_t c = 0;
    for (std::int64_t off = 0; off < len[s]; off += chunk, ++c)
      f(c, seg[s] + off * static_cast<std::int64_t>(e.esize), std::min(chunk, len[s] - off));
  };
  for_chunks(mod(r - k0 - 1, n), [&](std::uint32_t c, char* p, std::int64_t cnt) {
    e.send(next, k0, c, p, cnt * e.esize);
  });
  for (int k = k0; k < k1; ++k) {
    for_chunks(mod(r - k - 2, n), [&](std::uint32_t c, char* p, std::int64_t cnt) {
      const std::size_t bytes = cnt * e.esize;
      auto m = e.recv(prev, k, c, bytes);
      if (k < n - 1) {
        reduce_msg(e, p, m, cnt);
        if (k == n - 2 && e.op == ReduceOp::Avg) divide(e.type, p, static_cast<std::size_t>(cnt), n);
      } else {
        std::memcpy(p, m.payload.data(), bytes);
      }
      if (k + 1 < k1) e.send(next, k + 1, c, p, bytes);
    });
  }
  e.finish_sends();
}

// n near-equal segments of one buffer.
void split(char* base, std::int64_t numel, std::size_t esize, int n, std::vector<char*>* seg,
           std::vector<std::int64_t>* len) {
  const std::int64_t q = numel / n, extra = numel % n;
  std::int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    len->push_back(q + (i < extra ? 1 : 0));
    seg->push_back(base + off * static_cast<std::int64_t>(esize));
    off += len->back();
  }
}

void run_broadcast(Exec& e, char* buf, std::int64_t numel, int root, std::size_t small_bytes, std::size_t chunk_bytes) {
  const int n = e.n, vr = mod(e.me - root, n);
  auto real = [&](int v) { return mod(v + root, n); };
  const std::size_t bytes = numel * e.esize;
  if (bytes <= small_bytes) {  // binomial tree
    int mask = 1;
    while (mask < n) {
      if (vr & mask) {
        auto m = e.recv(real(vr - mask), 0, 0, bytes);
        std::memcpy(buf, m.payload.data(), bytes);
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (vr + mask < n) e.send(real(vr + mask), 0, 0, buf, bytes);
  } else {  // chain root -> root+1 -> ..., chunk by chunk
    const std::size_t chunk = std::max<std::size_t>(e.esize, chunk_bytes / e.esize * e.esize);
    std::uint32_t c = 0;
    for (std::size_t off = 0; off < bytes; off += chunk, ++c) {
      const std::size_t b = std::min(chunk, bytes - off);
      if (vr > 0) std::memcpy(buf + off, e.recv(real(vr - 1), 0, c, b).payload.data(), b);
      if (vr + 1 < n) e.send(real(vr + 1), 0, c, buf + off, b);
    }
  }
  e.finish_sends();
}

void run_reduce(Exec& e, char* work, std::int64_t numel, int root) {
  const int n = e.n, vr = mod(e.me - root, n);
  auto real = [&](int v) { return mod(v + root, n); };
  const std::size_t bytes = numel * e.esize;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      e.send(real(vr - mask), 0, 0, work, bytes);
      break;
    }
    if (vr + mask < n) reduce_msg(e, work, e.recv(real(vr + mask), 0, 0, bytes), numel);
  }
  if (vr == 0 && e.op == ReduceOp::Avg) divide(e.type, work, static_cast<std::size_t>(numel), n);
  e.finish_sends();
}

char* data(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

class FutureWork final : public Work {
 public:
  explicit FutureWork(Future<void> f) : f_(std::move(f)) {}
  bool is_completed() override { return f_.done(); }
  void wait() override { f_.value(); }

 private:
  Future<void> f_;
};

class SendWork final : public Work {
 public:
  SendWork(std::shared_ptr<SendTracker> t, Clock::time_point deadline, std::string what)
      : t_(std::move(t)), deadline_(deadline), what_(std::move(what)) {}
  bool is_completed() override { return t_->idle(); }
  void wait() override {
    if (!t_->wait_idle(deadline_)) throw TimeoutError(what_ + ": not delivered to ZeroMQ before the deadline");
  }

 private:
  std::shared_ptr<SendTracker> t_;
  Clock::time_point deadline_;
  std::string what_;
};

class RecvWork final : public Work {
 public:
  RecvWork(std::shared_ptr<Mesh> mesh, std::uint32_t group, int src, int tag, at::Tensor dst, at::Tensor staged,
           Clock::time_point deadline, std::string what)
      : mesh_(std::move(mesh)), group_(group), src_(src), tag_(tag), dst_(std::move(dst)), staged_(std::move(staged)),
        deadline_(deadline), what_(std::move(what)) {}
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return true;
    if (auto m = mesh_->try_recv(group_, src_, tag_)) complete(*m);
    return done_;
  }
  void wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
    if (done_) return;
    try {
      PgMessage m = mesh_->recv(group_, src_, tag_, deadline_, what_);
      complete(m);
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
  }

 private:
  void complete(const PgMessage& m) {
    const at::Tensor& t = staged_.defined() ? staged_ : dst_;
    const std::size_t bytes = t.numel() * t.element_size();
    if (m.h.dtype != dtype_code(t.scalar_type()) || m.h.numel != t.numel() || m.payload.size() != bytes) {
      error_ = std::make_exception_ptr(MismatchError(what_ + ": the sender sent " + dtype_name(m.h.dtype) + "[" +
                                                     std::to_string(m.h.numel) + "], this rank expects " +
                                                     describe_tensor(t)));
      done_ = true;
      std::rethrow_exception(error_);
    }
    std::memcpy(t.data_ptr(), m.payload.data(), bytes);
    if (staged_.defined()) dst_.copy_(staged_);
    done_ = true;
  }
  std::mutex mu_;
  std::shared_ptr<Mesh> mesh_;
  std::uint32_t group_;
  int src_, tag_;
  at::Tensor dst_, staged_;
  Clock::time_point deadline_;
  std::string what_;
  bool done_ = false;
  std::exception_ptr error_;
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

  WorkPtr isend(const at::Tensor& tensor, int dst, int tag) override {
    check_p2p(tensor, dst, tag, "isend to");
    const at::Tensor t = tensor.is_cpu() ? tensor : tensor.to(c10::kCPU);
    PgHeader h = p2p_header(t, tag);
    auto tracker = std::make_shared<SendTracker>();
    const std::string what = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")";
    mesh_->send(members_[dst], h, t.data_ptr(), t.numel() * t.element_size(), std::make_shared<at::Tensor>(t),
                tracker);
    return std::make_shared<SendWork>(tracker, Clock::now() + mesh_->options().timeout, what);
  }

  WorkPtr irecv(const at::Tensor& tensor, int src, int tag) override {
    check_p2p(tensor, src, tag, "irecv from");
    at::Tensor staged = tensor.is_cpu() ? at::Tensor() : tensor.to(c10::kCPU);
    return std::make_shared<RecvWork>(mesh_, id_, members_[src], tag, tensor, staged,
                                      Clock::now() + mesh_->options().timeout,
                                      "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")");
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    std::vector<bool> seen(size(), false);
    if (ranks.empty()) throw ArgumentError("new_group: the rank list is empty");
    int mine = -1;
    std::vector<int> members;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const int r = ranks[i];
      if (r < 0 || r >= size())
        throw ArgumentError("new_group: rank " + std::to_string(r) + " is not in this group of " + std::to_string(size()));
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
      throw TransportError("process group: unusable after an earlier failure (" + broken_ +
                           "); create a new one");
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
    if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
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
    const bool rooted = c.kind == Kind::Broadcast || c.kind == Kind::Reduce || c.kind == Kind::Gather ||
                        c.kind == Kind::Scatter;
    e.h.root = rooted ? c.root : 0;
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
    e.what = std::string(name(c.kind)) + " #" + std::to_string(seq) + " on rank " + std::to_string(rank());
    e.deadline = Clock::now() + mesh_->options().timeout;
    try {
      dispatch(e, c, keep);
    } catch (const std::exception& ex) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (broken_.empty()) broken_ = ex.what();
      }
      if (std::string(ex.what()).find("the group was aborted by rank") == std::string::npos)
        mesh_->send_abort(id_, members_, error_type(ex), ex.what());
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

  std::shared_ptr<Mesh> mesh_;
  std::uint32_t id_;
  std::vector<int> members_;
  std::shared_ptr<void> keepalive_;
  std::uint64_t seq_ = 0;          // the executing thread only
  std::uint32_t children_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::string broken_;
  std::thread worker_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_zmq_process_group(Store& store, int rank, int world_size,
                                                     const ProcessGroupOptions& options, const std::string& prefix,
                                                     std::shared_ptr<void> keepalive) {
  if (rank < 0 || world_size < 1 || rank >= world_size)
    throw ConfigError("process group: rank " + std::to_string(rank) + " of world size " + std::to_string(world_size) +
                      " is not valid");
  if (options.chunk_bytes < 1024) throw ConfigError("process group: chunk_bytes must be at least 1024");
  auto mesh = std::make_shared<Mesh>(store, prefix, rank, world_size, options);
  std::vector<int> members(world_size);
  for (int r = 0; r < world_size; ++r) members[r] = r;
  auto pg = std::make_shared<ZmqGroup>(std::move(mesh), 0, std::move(members), rank, std::move(keepalive));
  pg->barrier();  // every rank reachable before the first real collective
  return pg;
}

}  // namespace distrl::transport::detail
