#include "transport/collectives/detail/shm_collectives.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include <c10/core/ScalarType.h>

#include "common/stop_signal.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "transport/collectives/detail/reduce_ops.h"
#include "transport/link/endpoints.h"
#include "transport/link/shm/futex.h"
#include "transport/link/shm/segment.h"
#include "transport/link/shm/unix_socket.h"

namespace distrl::transport::detail {
namespace {

using Kind = ProcessGroup::Kind;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMagic = 0x43475344;  // "DSGC"
const std::string kHello = "distrl-pg/1";
const std::string kAnswer = "segment";
// How often a waiter looks at the Unix sockets of the ranks it still waits for.
constexpr auto kPeerCheck = std::chrono::milliseconds(20);
// How long a waiter spins before it sleeps on the futex (adaptive, see Spinner).
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr std::size_t kMaxSlot = std::size_t{1} << 30;

enum class AbortType : std::uint32_t { Transport = 0, Mismatch = 1, Timeout = 2 };

// What a rank says it runs; compared field by field after a collective's first barrier.
struct Desc {
  std::uint64_t seq;
  std::int64_t numel;
  std::int32_t root;
  std::uint8_t kind, dtype, op, pad;
  bool operator==(const Desc& o) const {
    return seq == o.seq && numel == o.numel && root == o.root && kind == o.kind && dtype == o.dtype && op == o.op;
  }
};

struct alignas(64) Control {
  std::uint32_t magic;  // written by rank 0 before anyone else maps the segment
  std::uint32_t world;
  std::uint64_t slot_bytes;
  std::uint64_t small_bytes;                     // decides the all_reduce path: every rank must use the same
  alignas(64) Doorbell bell;                     // rung after every arrival and by an abort
  alignas(64) std::atomic<std::uint32_t> claim;  // the first aborter takes it
  std::atomic<std::uint32_t> aborted;            // set after the fields below
  std::int32_t abort_from;
  std::uint32_t abort_type;
  char reason[480];
};

// One per rank, written only by that rank (a cache line pair of its own).
struct alignas(128) RankBlock {
  std::atomic<std::uint64_t> arrived;  // barriers this rank has reached
  Desc desc[2];                        // by collective number parity
};

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

std::string describe(const Desc& d) {
  const bool known_kind = d.kind <= static_cast<std::uint8_t>(Kind::Barrier);
  std::string s = known_kind ? ProcessGroup::name(static_cast<Kind>(d.kind)) : "an unknown collective";
  s += " #" + std::to_string(d.seq);
  if (!known_kind || static_cast<Kind>(d.kind) == Kind::Barrier) return s;
  const bool known_type = d.dtype < static_cast<std::uint8_t>(c10::ScalarType::NumOptions);
  s += std::string(" of ") + (known_type ? c10::toString(static_cast<c10::ScalarType>(d.dtype)) : "an unknown dtype") +
       "[" + std::to_string(d.numel) + "]";
  const Kind k = static_cast<Kind>(d.kind);
  if (k == Kind::Broadcast || k == Kind::Reduce || k == Kind::Gather || k == Kind::Scatter)
    s += " (root " + std::to_string(d.root) + ")";
  if ((k == Kind::Reduce || k == Kind::AllReduce || k == Kind::ReduceScatter) && d.op <= 4)
    s += std::string(" (") + to_string(static_cast<ReduceOp>(d.op)) + ")";
  return s;
}

char* data(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }

}  // namespace

struct ShmCollectives::Impl {
  Impl(int r, int n, const ProcessGroupOptions& o)
      : rank(r), world(n), small_bytes(o.small_bytes), slot_bytes(round_up(o.chunk_bytes, 64)), spinner(kSpin) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    blocks_off = round_up(sizeof(Control), 128);
    slots_off = round_up(blocks_off + sizeof(RankBlock) * n, page);
    if (o.chunk_bytes > kMaxSlot)  // also keeps the sizes below far from overflowing
      throw ConfigError("chunk_bytes " + std::to_string(o.chunk_bytes) + " is over the shared-memory slot limit (" +
                        std::to_string(kMaxSlot) + ")");
    total = round_up(slots_off + slot_bytes * 2 * n, page);  // what Segment::create makes: whole pages
  }

  int rank, world;
  std::size_t small_bytes, slot_bytes, blocks_off = 0, slots_off = 0, total = 0;
  Segment seg;
  UnixSocket listener;
  std::string path;               // rank 0's socket until every member has its segment
  std::vector<UnixSocket> peers;  // rank 0: one per member (index = rank); others: [0] = rank 0
  Spinner spinner;
  std::uint64_t barriers = 0;  // barriers this rank has reached
  std::uint64_t chunks = 0;    // data steps run: which of the two slots is next
  Clock::time_point next_check{};

  // The collective running now.
  Desc desc{};
  bool first = true;
  Clock::time_point deadline{};
  std::string what;
  c10::ScalarType type = c10::ScalarType::Byte;
  std::size_t esize = 1;
  ReduceOp op = ReduceOp::Sum;

  // Rank 0, once every member is admitted: a thread that watches the members' sockets, so that a
  // member's death aborts the group at once, naming it, whether or not rank 0 is in a
  // collective (the members watch only rank 0's socket). Stopped (and joined) by stop_watching.
  std::thread watcher;
  OwnedFd watcher_stop;  // an eventfd: written to stop the watcher

  Control& ctl() const { return *static_cast<Control*>(seg.data()); }

  // Marks the group aborted (the first reason wins) and wakes every waiter.
  void abort(AbortType type, int from, const std::string& reason) {
    Control& c = ctl();
    std::uint32_t expected = 0;
    if (c.claim.compare_exchange_strong(expected, 1)) {
      c.abort_from = from;
      c.abort_type = static_cast<std::uint32_t>(type);
      const std::size_t n = std::min(reason.size(), sizeof c.reason - 1);
      std::memcpy(c.reason, reason.data(), n);
      c.reason[n] = '\0';
      c.aborted.store(1, std::memory_order_release);
    }
    c.bell.ring();
  }

  static std::string gone(int i) {
    return "rank " + std::to_string(i) +
           " is gone (its shared-memory connection closed: the process exited, crashed or destroyed the group)";
  }

  void watch_members() {
    watcher_stop = OwnedFd(::eventfd(0, EFD_CLOEXEC));
    if (watcher_stop.get() < 0) return;  // no thread: rank 0's own waits still see deaths
    watcher = std::thread([this] {
      name_this_thread("distrl-pg-watch");
      std::vector<pollfd> fds{{watcher_stop.get(), POLLIN, 0}};
      std::vector<int> ranks{-1};
      for (int i = 1; i < world; ++i) {
        fds.push_back({peers[static_cast<std::size_t>(i)].fd(), POLLRDHUP, 0});
        ranks.push_back(i);
      }
      while (fds.size() > 1) {
        if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
        if (fds[0].revents != 0) return;
        for (std::size_t k = fds.size(); k-- > 1;) {
          if ((fds[k].revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) continue;
          abort(AbortType::Transport, 0, gone(ranks[k]));
          fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(k));
          ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
    });
  }

  void stop_watching() {
    if (!watcher.joinable()) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(watcher_stop.get(), &one, sizeof one);  // an eventfd: never short
    watcher.join();
  }
  RankBlock& block(int i) const { return reinterpret_cast<RankBlock*>(static_cast<char*>(seg.data()) + blocks_off)[i]; }
  // Rank i's slot for the current data step.
  char* slot(int i) const {
    return static_cast<char*>(seg.data()) + slots_off + (static_cast<std::size_t>(i) * 2 + chunks % 2) * slot_bytes;
  }

  // Reaches the next barrier and waits for every rank to reach it; the collective's first one
  // also checks that every rank runs the same collective.
  void meet() {
    ++barriers;
    block(rank).arrived.store(barriers, std::memory_order_release);
    ctl().bell.ring();
    auto ready = [&] {  // an abort counts only while someone is missing: all here, mismatches are our own
      for (int i = 0; i < world; ++i)
        if (block(i).arrived.load(std::memory_order_acquire) < barriers) {
          if (ctl().aborted.load(std::memory_order_acquire) != 0) throw_aborted();
          check_peers();
          return false;
        }
      return true;
    };
    if (!wait_on(ctl().bell, spinner, deadline, ready)) timed_out();
    if (first) {
      first = false;
      for (int i = 0; i < world; ++i) {
        Desc other;
        std::memcpy(&other, &block(i).desc[desc.seq % 2], sizeof other);
        if (!(other == desc))
          throw MismatchError(what + ": rank " + std::to_string(i) + " called " + describe(other) + " but this rank " +
                              describe(desc) +
                              "; every rank must issue the same collectives in the same order, "
                              "with tensors of one dtype and size");
      }
    }
  }

  // The ranks that have not reached the current barrier.
  std::vector<int> missing() const {
    std::vector<int> out;
    for (int i = 0; i < world; ++i)
      if (block(i).arrived.load(std::memory_order_acquire) < barriers) out.push_back(i);
    return out;
  }

  // A missing rank whose socket closed is gone: its process exited or was killed.
  void check_peers() {
    const auto now = Clock::now();
    if (now < next_check) return;
    next_check = now + kPeerCheck;
    for (int i : missing()) {
      const std::size_t at = rank == 0 ? static_cast<std::size_t>(i) : 0;
      if ((rank == 0 || i == 0) && at < peers.size() && peers[at] && peers[at].peer_closed())
        throw TransportError(what + ": " + gone(i));
    }
  }

  [[noreturn]] void timed_out() const {
    std::string who;
    for (int i : missing()) who += (who.empty() ? "" : ", ") + std::to_string(i);
    throw TimeoutError(what + ": timed out waiting for rank" + (who.find(',') == std::string::npos ? " " : "s ") + who +
                       " (is it running the same sequence of collectives?)");
  }

  [[noreturn]] void throw_aborted() const {
    const Control& c = ctl();
    char reason[sizeof c.reason];
    std::memcpy(reason, c.reason, sizeof reason);
    reason[sizeof reason - 1] = '\0';
    const std::string msg = what + ": the group was aborted by rank " + std::to_string(c.abort_from) + ": " + reason;
    if (c.abort_type == static_cast<std::uint32_t>(AbortType::Mismatch)) throw MismatchError(msg);
    if (c.abort_type == static_cast<std::uint32_t>(AbortType::Timeout)) throw TimeoutError(msg);
    throw TransportError(msg);
  }

  // n near-equal parts of len elements: part i is [begin(i), begin(i + 1)).
  std::int64_t begin(std::int64_t len, int i) const { return len * i / world; }

  void fill(char* dst, const char* src, std::int64_t elems) const { std::memcpy(dst, src, elems * esize); }
  // dst (len elements, holding this rank's operand) op= every other rank's slot at `at`.
  void reduce_others(char* dst, std::size_t at, std::int64_t len) const {
    for (int i = 0; i < world; ++i)
      if (i != rank) reduce_into(op, type, dst, slot(i) + at, len);
    if (op == ReduceOp::Avg) divide(type, dst, len, world);
  }

  void all_reduce(char* t, std::int64_t numel);
  void broadcast(char* t, std::int64_t numel, int root);
  void reduce(char* t, std::int64_t numel, int root);
  void all_gather(const std::vector<at::Tensor>& out, const char* in, std::int64_t numel, bool only_root, int root);
  void scatter_pieces(char* out, const std::vector<at::Tensor>& in, std::int64_t numel, int root, bool reduce);
};

void ShmCollectives::Impl::all_reduce(char* t, std::int64_t numel) {
  const std::size_t bytes = numel * esize;
  if (bytes <= small_bytes && bytes <= slot_bytes) {  // one barrier: everyone reduces everything, in rank order
    fill(slot(rank), t, numel);
    meet();
    std::memcpy(t, slot(0), bytes);
    for (int i = 1; i < world; ++i) reduce_into(op, type, t, slot(i), numel);
    if (op == ReduceOp::Avg) divide(type, t, numel, world);
    ++chunks;
    return;
  }
  const std::int64_t per = slot_bytes / esize;
  for (std::int64_t off = 0; off < numel; off += per, ++chunks) {
    const std::int64_t len = std::min(per, numel - off);
    char* base = t + off * esize;
    const std::int64_t a = begin(len, rank), b = begin(len, rank + 1);
    // The others need every part but ours (ours stays in t until it is reduced and published).
    fill(slot(rank), base, a);
    fill(slot(rank) + b * esize, base + b * esize, len - b);
    meet();
    reduce_others(base + a * esize, a * esize, b - a);  // part `rank`, computed here only
    std::memcpy(slot(rank) + a * esize, base + a * esize, (b - a) * esize);
    meet();
    for (int i = 0; i < world; ++i) {
      const std::int64_t ai = begin(len, i), bi = begin(len, i + 1);
      if (i != rank) std::memcpy(base + ai * esize, slot(i) + ai * esize, (bi - ai) * esize);
    }
  }
}

void ShmCollectives::Impl::broadcast(char* t, std::int64_t numel, int root) {
  const std::int64_t per = slot_bytes / esize;
  for (std::int64_t off = 0; off < numel; off += per, ++chunks) {
    const std::int64_t len = std::min(per, numel - off);
    if (rank == root) fill(slot(root), t + off * esize, len);
    meet();
    if (rank != root) std::memcpy(t + off * esize, slot(root), len * esize);
  }
}

void ShmCollectives::Impl::reduce(char* t, std::int64_t numel, int root) {
  const std::int64_t per = slot_bytes / esize;
  for (std::int64_t off = 0; off < numel; off += per, ++chunks) {
    const std::int64_t len = std::min(per, numel - off);
    fill(slot(rank), t + off * esize, len);
    meet();
    if (rank == root) reduce_others(t + off * esize, 0, len);
  }
}

// all_gather (every rank reads) and gather (only root reads).
void ShmCollectives::Impl::all_gather(const std::vector<at::Tensor>& out, const char* in, std::int64_t numel,
                                      bool only_root, int root) {
  const std::int64_t per = slot_bytes / esize;
  if ((!only_root || rank == root) && data(out[rank]) != in) std::memcpy(data(out[rank]), in, numel * esize);
  for (std::int64_t off = 0; off < numel; off += per, ++chunks) {
    const std::int64_t len = std::min(per, numel - off);
    fill(slot(rank), in + off * esize, len);
    meet();
    if (only_root && rank != root) continue;
    for (int i = 0; i < world; ++i)
      if (i != rank) std::memcpy(data(out[i]) + off * esize, slot(i), len * esize);
  }
}

// reduce_scatter (every rank puts in[j] in piece j of its slot; rank r reduces the pieces r)
// and scatter (only root puts; rank r copies root's piece r).
void ShmCollectives::Impl::scatter_pieces(char* out, const std::vector<at::Tensor>& in, std::int64_t numel, int root,
                                          bool reduce) {
  const std::int64_t per = static_cast<std::int64_t>(slot_bytes / esize) / world;
  for (std::int64_t off = 0; off < numel; off += per, ++chunks) {
    const std::int64_t len = std::min(per, numel - off);
    const std::size_t piece = static_cast<std::size_t>(per) * esize;
    if (reduce || rank == root)
      for (int j = 0; j < world; ++j) fill(slot(rank) + j * piece, data(in[j]) + off * esize, len);
    meet();
    char* dst = out + off * esize;
    if (!reduce) {
      std::memcpy(dst, slot(root) + rank * piece, len * esize);
      continue;
    }
    std::memcpy(dst, slot(rank) + rank * piece, len * esize);
    reduce_others(dst, rank * piece, len);
  }
}

ShmCollectives::ShmCollectives(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ShmCollectives::~ShmCollectives() {
  if (impl_) impl_->stop_watching();
  if (impl_ && !impl_->path.empty()) {
    ::unlink(impl_->path.c_str());
    forget_on_fatal_signal(impl_->path.c_str());
  }
}

std::unique_ptr<ShmCollectives> ShmCollectives::host(int world, const ProcessGroupOptions& options, std::string* why) {
  try {
    auto impl = std::make_unique<Impl>(0, world, options);
    if (impl->slot_bytes / 16 < static_cast<std::size_t>(world))
      throw ConfigError("chunk_bytes " + std::to_string(options.chunk_bytes) + " is too small for " +
                        std::to_string(world) + " ranks");
    impl->seg = Segment::create("distrl-pg", impl->total);
    Control& c = impl->ctl();
    c.magic = kMagic;
    c.world = static_cast<std::uint32_t>(world);
    c.slot_bytes = impl->slot_bytes;
    c.small_bytes = impl->small_bytes;
    const std::string ep = shm_endpoint_to_bind("pg");
    impl->path = ep.substr(std::string("shm://").size());
    impl->listener = UnixSocket::listen(impl->path);
    return std::unique_ptr<ShmCollectives>(new ShmCollectives(std::move(impl)));
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
}

std::string ShmCollectives::address() const { return "shm://" + impl_->path; }

void ShmCollectives::admit_members(Clock::time_point deadline) {
  Impl& m = *impl_;
  m.peers.resize(m.world);
  for (int admitted = 0; admitted < m.world - 1;) {
    UnixSocket s = m.listener.accept(deadline);
    if (!s) {
      std::string who;
      for (int i = 1; i < m.world; ++i)
        if (!m.peers[i]) who += (who.empty() ? "" : ", ") + std::to_string(i);
      throw TimeoutError("process group: shared memory: rank(s) " + who + " did not connect in time");
    }
    try {
      std::vector<int> raw;
      const std::string hello = s.receive(64, &raw, std::min(deadline, Clock::now() + std::chrono::seconds(2)));
      for (int fd : raw) ::close(fd);
      const std::string prefix = kHello + " ";
      int r = -1;
      if (hello.compare(0, prefix.size(), prefix) == 0 && hello.size() > prefix.size() &&
          hello.size() - prefix.size() <= 6 &&
          hello.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
        r = std::stoi(hello.substr(prefix.size()));
      if (r < 1 || r >= m.world || m.peers[r]) throw ProtocolError("a malformed or repeated hello");
      s.send(kAnswer, {m.seg.fd()});
      m.peers[r] = std::move(s);
      ++admitted;
    } catch (const TimeoutError&) {
      DISTRL_LOG(Warn, "process group: shared memory: a connection said nothing; closed");
    } catch (const Error& e) {
      DISTRL_LOG(Warn, "process group: shared memory: a connection closed: " << e.what());
    }
  }
  m.listener.close();
  ::unlink(m.path.c_str());
  forget_on_fatal_signal(m.path.c_str());
  m.path.clear();
  m.watch_members();
}

std::unique_ptr<ShmCollectives> ShmCollectives::join(const std::string& address, int rank, int world,
                                                     const ProcessGroupOptions& options, Clock::time_point deadline) {
  auto impl = std::make_unique<Impl>(rank, world, options);
  const std::string scheme = "shm://";
  if (address.compare(0, scheme.size(), scheme) != 0)
    throw ProtocolError("process group: rank 0 published '" + address + "' as its shared-memory address");
  UnixSocket s = UnixSocket::connect(address.substr(scheme.size()), deadline);
  s.send(kHello + " " + std::to_string(rank));
  std::vector<int> raw;
  const std::string answer = s.receive(64, &raw, deadline);
  std::vector<OwnedFd> fds;
  for (int fd : raw) fds.emplace_back(fd);
  if (answer != kAnswer || fds.size() != 1)
    throw ProtocolError("process group: rank 0 answered the shared-memory hello with something else");
  impl->seg = Segment::attach(fds[0].release(), impl->total, "rank 0's collectives segment");
  const Control& c = impl->ctl();
  if (c.magic != kMagic || c.world != static_cast<std::uint32_t>(world) || c.slot_bytes != impl->slot_bytes ||
      c.small_bytes != impl->small_bytes)
    throw ConfigError(
        "process group: rank 0 made its shared memory for another group (world size, chunk_bytes or "
        "small_bytes differ between ranks)");
  impl->peers.push_back(std::move(s));
  return std::unique_ptr<ShmCollectives>(new ShmCollectives(std::move(impl)));
}

void ShmCollectives::abort(const std::string& type, const std::string& reason) {
  impl_->abort(type == "MismatchError"  ? AbortType::Mismatch
               : type == "TimeoutError" ? AbortType::Timeout
                                        : AbortType::Transport,
               impl_->rank, reason);
}

void ShmCollectives::run(ProcessGroup::Call& call, std::uint64_t seq, Clock::time_point deadline,
                         const std::string& what) {
  Impl& m = *impl_;
  const bool barrier = call.kind == Kind::Barrier;
  const at::Tensor& ref = barrier ? call.single : (call.single.defined() ? call.single : call.tensors[0]);
  const std::int64_t numel = barrier ? 0 : ref.numel();
  m.type = barrier ? c10::ScalarType::Byte : ref.scalar_type();
  m.esize = barrier ? 1 : ref.element_size();
  m.op = call.op;
  m.what = what;
  m.deadline = deadline;
  m.first = true;
  const bool rooted = call.kind == Kind::Broadcast || call.kind == Kind::Reduce || call.kind == Kind::Gather ||
                      call.kind == Kind::Scatter;
  const bool reduces = call.kind == Kind::Reduce || call.kind == Kind::AllReduce || call.kind == Kind::ReduceScatter;
  m.desc = Desc{seq,
                numel,
                rooted ? call.root : 0,
                static_cast<std::uint8_t>(call.kind),
                static_cast<std::uint8_t>(m.type),
                static_cast<std::uint8_t>(reduces ? call.op : ReduceOp::Sum),
                0};
  std::memcpy(&m.block(m.rank).desc[seq % 2], &m.desc, sizeof m.desc);
  if (numel == 0) return m.meet();
  switch (call.kind) {
    case Kind::AllReduce: return m.all_reduce(data(call.tensors[0]), numel);
    case Kind::Broadcast: return m.broadcast(data(call.tensors[0]), numel, call.root);
    case Kind::Reduce: return m.reduce(data(call.tensors[0]), numel, call.root);
    case Kind::AllGather: return m.all_gather(call.tensors, data(call.single), numel, false, 0);
    case Kind::Gather: {
      static const std::vector<at::Tensor> none;
      return m.all_gather(m.rank == call.root ? call.tensors : none, data(call.single), numel, true, call.root);
    }
    case Kind::ReduceScatter: return m.scatter_pieces(data(call.single), call.tensors, numel, 0, true);
    case Kind::Scatter: return m.scatter_pieces(data(call.single), call.tensors, numel, call.root, false);
    case Kind::Barrier: return m.meet();
  }
}

}  // namespace distrl::transport::detail
