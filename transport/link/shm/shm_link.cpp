#include "transport/link/shm/shm_link.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/stop_signal.h"
#include "common/error.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace distrl::transport::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The descriptor accept_all sets free when the process has none left (see there).
OwnedFd reserve_descriptor() { return OwnedFd(::open("/dev/null", O_RDONLY | O_CLOEXEC)); }

constexpr int kDrainCap = 256;  // messages per connection per round
// What may wait for room behind a connection's writer (or for a peer's connection): 65,536
// messages and 128 MiB, whichever comes first (ZeroMQ's high-water mark here is 100,000
// messages). A message is always taken when nothing waits, however big: the bound refuses a
// flood (a peer that never reads its replies), never one large tensor.
constexpr std::size_t kMaxQueued = 1u << 16;
constexpr std::size_t kMaxQueuedBytes = 128u << 20;

bool queue_full(std::size_t messages, std::size_t bytes, std::size_t more) {
  return messages > 0 && (messages >= kMaxQueued || bytes + more > kMaxQueuedBytes);
}

std::string queue_full_message(std::size_t messages, std::size_t bytes) {
  return "its send queue is full (" + std::to_string(messages) + " messages, " + std::to_string(bytes >> 20) +
         " MiB waiting; the bound is " + std::to_string(kMaxQueued) + " messages or " +
         std::to_string(kMaxQueuedBytes >> 20) + " MiB): it does not read what it is sent";
}
constexpr auto kHandshakeWait = std::chrono::milliseconds(2000);
constexpr auto kSocketCheck = std::chrono::milliseconds(1);  // deaths and connections, while busy
// Connections accepted at once (handshakes included): what a peer can make this process hold
// (two mapped rings and a descriptor each). A world of N processes uses N + its calling threads.
constexpr std::size_t kMaxAccepted = 4096;

// A caller's route: its connection's id, 8 bytes.
Frame route_of(std::uint64_t id) { return Frame(&id, sizeof id); }
std::uint64_t id_of(const Frame& route) {
  std::uint64_t id = 0;
  if (route.size() == sizeof id) std::memcpy(&id, route.data(), sizeof id);
  return id;
}

// Runs f, turning any error into a TransportError (what the seam promises a channel throws).
template <typename F>
auto guard(F&& f) {
  try {
    return f();
  } catch (const TransportError&) {
    throw;
  } catch (const std::exception& e) {
    throw TransportError(e.what());
  }
}

// The sync fast path's connection: a ring pair the calling thread holds. Every failure is a
// TransportError (the seam's promise); a channel whose send failed part-way is not reused (RPC
// drops a channel that threw).
class ShmChannel final : public Channel {
 public:
  ShmChannel(RingPair pair, const ShmLink::Options& o)
      : pair_(std::move(pair)), decoder_(o.max_parts, o.max_message_bytes), spinner_(o.spin),
        send_timeout_(o.send_timeout) {}
  // Writes the whole message, waiting for room in slices: a peer that died or stopped reading
  // ends the wait (at its socket's EOF, or after send_timeout), never a hang.
  bool send(Frames& frames) override {
    guard([&] {
      writer_.start(std::move(frames));
      const auto deadline = Clock::now() + send_timeout_;
      while (!writer_.pump(pair_.out)) {
        if (pair_.socket.peer_closed())
          throw TransportError("shared-memory connection to " + pair_.out.peer() + " lost");
        if (Clock::now() >= deadline)
          throw TimeoutError("shared-memory connection to " + pair_.out.peer() + ": no room in its ring for " +
                             std::to_string(send_timeout_.count()) + " ms (it stopped reading)");
        pair_.out.wait_writable(pair_.out.capacity() / 4, std::min(deadline, Clock::now() + kSlice), spinner_);
      }
    });
    return true;
  }
  bool readable(std::chrono::milliseconds wait) override {
    return guard([&] {
      if (wait.count() == 0) return pair_.in.readable() > 0 || pair_.in.closed();  // a look: no spin, no syscall
      if (pair_.in.wait_readable(Clock::now() + wait, spinner_)) return true;
      if (pair_.socket.peer_closed()) throw TransportError("shared-memory connection to " + pair_.in.peer() + " lost");
      return false;
    });
  }
  Received receive(Frames& out, std::size_t) override {
    return guard([&] {
      const Received got = decoder_.next(pair_.in, out);
      if (got == Received::Nothing && pair_.in.closed())
        throw TransportError("shared-memory connection to " + pair_.in.peer() + " closed by its agent (it shut down)");
      return got;
    });
  }

 private:
  static constexpr auto kSlice = std::chrono::milliseconds(10);
  RingPair pair_;
  MessageDecoder decoder_;
  MessageWriter writer_;
  Spinner spinner_;
  std::chrono::milliseconds send_timeout_;
};

}  // namespace

struct ShmLink::Conn {
  Conn(RingPair p, const Options& o, int r, bool out)
      : pair(std::move(p)), decoder(o.max_parts, o.max_message_bytes), rank(r), outgoing(out) {}
  RingPair pair;
  MessageDecoder decoder;
  MessageWriter writer;
  std::deque<Frames> waiting;  // behind the message writer
  std::size_t waiting_bytes = 0;
  std::uint64_t refused = 0;  // messages refused by the queue's bound
  int rank;                   // outgoing: the peer; accepted: the caller's rank (-1: not a member)
  bool outgoing;
  Slot* slot = nullptr;            // outgoing: the peer's; accepted: own_slot
  std::shared_ptr<Slot> own_slot;  // accepted: its slot, also in routes_ while it is open
  bool answered = true;            // outgoing: the acceptor's answer read
  bool io = false;                 // accepted: an I/O thread's connection (we beat on it)
  bool broken = false;             // a write failed (its ring is unusable): closed after the round
  std::uint64_t id = 0;            // accepted: the route
  // Outgoing: the peer's beat as last seen, when it last changed, and whether it is overdue.
  std::uint64_t beat = 0;
  Clock::time_point beat_seen{};
  bool stalled = false;
};

ShmLink::ShmLink(Options options, Events events) : options_(std::move(options)), cb_(std::move(events)) {}

ShmLink::~ShmLink() { stop(); }

std::string ShmLink::path_of(const std::string& endpoint) {
  if (endpoint.rfind("shm://", 0) != 0)
    throw ConfigError("shared memory: '" + endpoint + "' is not an shm:// endpoint");
  return endpoint.substr(6);
}

std::vector<std::string> ShmLink::bind(const std::vector<std::string>& endpoints) {
  if (endpoints.empty()) throw ArgumentError("shared memory: bind needs an endpoint");
  // A ring this process can create, or no shared memory at all (the caller falls back).
  (void)Segment::create("distrl-probe", ring_segment_bytes(options_.ring_bytes));
  path_ = path_of(endpoints.front());
  listener_ = UnixSocket::listen(path_);
  reserve_ = reserve_descriptor();
  // Each connection holds 4 descriptors here (its socket, two ring memfds, the caller's eventfd).
  const auto budget = descriptor_budget();
  if (budget.limit > 0)
    DISTRL_LOG(Info, "shared memory: listening at " << path_ << "; the descriptor limit (" << budget.limit << ", "
                                                    << budget.open << " open) allows about "
                                                    << std::max(0L, (budget.limit - budget.open) / 4)
                                                    << " connections (ulimit -n raises it)");
  return {endpoints.front()};
}

void ShmLink::set_peers(std::vector<std::string> endpoints) {
  peer_endpoints_ = std::move(endpoints);
  peers_.resize(peer_endpoints_.size());
  peer_down_.resize(peer_endpoints_.size());
  unsent_ = std::vector<Unsent>(peer_endpoints_.size());  // constructed in place: Frames do not copy
  slots_ = std::make_unique<Slot[]>(peer_endpoints_.size());
}

void ShmLink::start() {
  beater_.start();
  io_.start(options_.thread_init, [this] { run(); });
}

void ShmLink::stop() {
  const bool first = io_.stop();
  beater_.stop();
  if (first && !path_.empty()) {
    ::unlink(path_.c_str());
    forget_on_fatal_signal(path_.c_str());
  }
}

bool ShmLink::post(std::function<void()> fn) { return io_.post(std::move(fn)); }

// ------------------------------------------------------------------ the beat

void ShmLink::Beater::start() {
  thread_ = std::thread([this] {
    name_this_thread("distrl-beat");
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; }))
      for (auto& [id, word] : words_) word->fetch_add(1, std::memory_order_relaxed);
  });
}

void ShmLink::Beater::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ShmLink::Beater::add(std::uint64_t id, std::atomic<std::uint64_t>* word) {
  std::lock_guard<std::mutex> lock(mu_);
  words_.emplace(id, word);
}

void ShmLink::Beater::remove(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  words_.erase(id);
}

// ------------------------------------------------------------------ sending

ShmLink::Conn* ShmLink::connect_peer(int peer, std::string* error, bool* later) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) {
    *error = "no such rank " + std::to_string(peer);
    return nullptr;
  }
  if (!peer_down_[peer].empty()) {
    *error = peer_down_[peer];
    return nullptr;
  }
  if (peers_[peer]) return peers_[peer].get();
  if (peer_endpoints_[peer].empty()) {  // a PairLink moved it to its other link (a rejoin)
    *error = "rank " + std::to_string(peer) + " is not reached over shared memory (any more)";
    return nullptr;
  }
  Unsent& u = unsent_[peer];
  const auto now = Clock::now();
  if (now < u.retry_at) {  // the last try was refused: not before its backoff
    if (later) *later = true;
    *error = "cannot connect to " + peer_endpoints_.at(peer) + " yet";
    return nullptr;
  }
  const std::string name = "rank " + std::to_string(peer);
  const auto gone = [&](const std::exception& e) -> Conn* {
    peer_lost(peer, "cannot connect to " + peer_endpoints_.at(peer) + ": " + e.what());
    *error = peer_down_[peer];
    return nullptr;
  };
  try {
    Hello h;
    h.capacity = options_.ring_bytes;
    h.kind = "io";
    h.rank = options_.rank;
    // One attempt now (this thread must not wait for a peer): a listener that is gone means a
    // dead peer; one that cannot take the connection yet is tried again later (retry_connects).
    RingPair p = open_ring_pair(path_of(peer_endpoints_.at(peer)), h, io_.wake_fd(), name, now);
    peers_[peer] = std::make_unique<Conn>(std::move(p), options_, peer, true);
    peers_[peer]->answered = false;
    peers_[peer]->slot = &slots_[peer];
    peers_[peer]->beat_seen = now;   // an acceptor that never answers is overdue too
  } catch (const TimeoutError& e) {  // nobody listens there: the process is gone
    return gone(e);
  } catch (const WrongListener& e) {  // a stranger holds its address: the peer is gone
    return gone(e);
  } catch (const std::exception& e) {
    // Its listener is there but cannot take the connection now (a full backlog), or this
    // process is out of descriptors: not a death. Try again after the backoff.
    u.back_off(now);
    DISTRL_LOG(Debug, "shared memory: cannot connect to " << name << " yet (" << e.what() << "); again in "
                                                          << u.backoff.count() << " ms");
    if (later) *later = true;
    *error = "cannot connect to " + peer_endpoints_.at(peer) + " yet: " + e.what();
    return nullptr;
  }
  u.backoff = std::chrono::milliseconds(0);
  u.watch = false;
  Conn* c = peers_[peer].get();
  u.bytes = 0;
  for (; !u.frames.empty(); u.frames.pop_front()) {  // what waited for this connection goes first, in order
    try {
      queue(*c, u.frames.front());
    } catch (const std::exception& e) {  // that message alone fails (its call ends at its deadline)
      report_dropped(cb_, "a message to rank " + std::to_string(peer) + " that waited for its connection: " + e.what());
    }
  }
  return c;
}

void ShmLink::retry_connects(Clock::time_point now) {
  if (!any_unsent_) return;
  bool left = false;
  for (std::size_t p = 0; p < unsent_.size(); ++p) {
    if (unsent_[p].frames.empty() && !unsent_[p].watch) continue;
    if (!peers_[p] && now >= unsent_[p].retry_at) {
      std::string ignored;
      (void)connect_peer(static_cast<int>(p), &ignored);  // sends what waited, or backs off again
    }
    left = left || !unsent_[p].frames.empty() || unsent_[p].watch;
  }
  any_unsent_ = left;
}

bool ShmLink::queue(Conn& c, Frames& frames) {
  const std::size_t bytes = frames_bytes(frames);
  const auto lock = lock_out(c);
  if (c.writer.idle() && c.waiting.empty()) {
    c.writer.start(std::move(frames));
    pump(c);
  } else {
    if (queue_full(c.waiting.size(), c.waiting_bytes, bytes)) {
      ++c.refused;
      if ((c.refused & (c.refused - 1)) == 0)  // the 1st, 2nd, 4th, 8th ... logged
        DISTRL_LOG(Warn, "shared memory: " << (c.outgoing ? "a request to " : "a reply to ")
                                           << (c.rank >= 0 ? "rank " + std::to_string(c.rank) : "a non-member")
                                           << " refused (" << c.refused
                                           << " so far): " << queue_full_message(c.waiting.size(), c.waiting_bytes));
      return false;
    }
    c.waiting.push_back(std::move(frames));
    c.waiting_bytes += bytes;
  }
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

bool ShmLink::pump(Conn& c) {
  bool moved = false;
  while (!c.writer.idle() || !c.waiting.empty()) {
    if (c.writer.idle()) {
      c.waiting_bytes -= frames_bytes(c.waiting.front());
      c.writer.start(std::move(c.waiting.front()));
      c.waiting.pop_front();
    }
    const bool done = c.writer.pump(c.pair.out);
    moved = true;
    if (!done) break;
  }
  return moved;
}

std::unique_lock<std::mutex> ShmLink::lock_out(Conn& c, bool try_only) {
  if (try_only) return std::unique_lock<std::mutex>(c.slot->mu, std::try_to_lock);
  return std::unique_lock<std::mutex>(c.slot->mu);
}

void ShmLink::open_slot(int p) {
  Conn* c = peers_[p].get();
  std::lock_guard<std::mutex> lock(slots_[p].mu);
  slots_[p].conn = c != nullptr && c->answered && !c->stalled && peer_down_[p].empty() ? c : nullptr;
}

void ShmLink::close_slot(Slot& slot) {
  std::lock_guard<std::mutex> lock(slot.mu);
  slot.conn = nullptr;  // callers hand off from here
}

void ShmLink::retire_peer(int p) {
  close_slot(slots_[p]);
  if (peers_[p]) retired_.push_back(std::move(peers_[p]));
}

bool ShmLink::write_now(Slot& slot, Frames& frames) {
  std::unique_lock<std::mutex> lock(slot.mu, std::try_to_lock);
  Conn* c = lock.owns_lock() && slot.posted.load() == 0 ? slot.conn : nullptr;
  bool fits = false;
  try {
    fits = c != nullptr && c->writer.idle() && c->waiting.empty() && frames.size() <= kMaxRingFrames &&
           c->pair.out.writable() >= MessageWriter::wire_bytes(frames);
  } catch (const std::exception&) {
    // The reader's index is impossible: the I/O thread's send finds it too and drops the connection.
  }
  if (!fits) return false;
  written_by_callers_.fetch_add(1, std::memory_order_relaxed);
  const std::size_t bytes = frames_bytes(frames);
  try {
    c->writer.start(std::move(frames));
    c->writer.pump(c->pair.out);  // all of it: it fits
  } catch (const std::exception&) {
    // The reader's index turned impossible meanwhile: the I/O thread's next pump of this
    // connection (its writer is mid-message) fails the same way and drops it, which fails the call.
  }
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

bool ShmLink::send_any_thread(int peer, Frames& frames, std::string* error) {
  if (peer < 0 || peer >= static_cast<int>(peer_endpoints_.size()))
    return send_on_io_thread(*this, cb_, peer, frames, error);  // the I/O thread's own error
  Slot& slot = slots_[peer];
  // The I/O thread sends at once too, unless messages handed to it for this peer still wait in
  // its task queue: then behind them (a reply it sends for a message it read may have been
  // caused by one of them).
  const bool on_io = io_.on_thread();
  if (on_io && slot.posted.load() == 0) return send_to_peer(peer, frames, error);
  if (!on_io && write_now(slot, frames)) return true;
  slot.posted.fetch_add(1);
  if (send_on_io_thread(
          *this, cb_, peer, frames, error, [&slot] { slot.posted.fetch_sub(1); }, true))
    return true;
  slot.posted.fetch_sub(1);
  return false;
}

bool ShmLink::send_reply_any_thread(const Caller& to, Frames& frames) {
  if (io_.on_thread()) {  // at once, unless replies handed to it for this caller still wait
    auto it = accepted_.find(id_of(to.route));
    if (it == accepted_.end() || it->second->slot->posted.load() == 0) return send_reply(to, frames);
  }
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(routes_mu_);
    auto it = routes_.find(id_of(to.route));
    if (it != routes_.end()) slot = it->second;
  }
  if (slot == nullptr) return false;  // the caller is gone
  if (!io_.on_thread() && write_now(*slot, frames)) return true;
  slot->posted.fetch_add(1);
  if (reply_on_io_thread(
          *this, cb_, to, frames, [slot] { slot->posted.fetch_sub(1); }, true))
    return true;
  slot->posted.fetch_sub(1);
  return false;
}

bool ShmLink::send_to_peer(int peer, Frames& frames, std::string* error) {
  bool later = false;
  Conn* c = connect_peer(peer, error, &later);
  if (c == nullptr && later) {  // waits for a connection (retry_connects), or its call's deadline
    Unsent& u = unsent_[peer];
    const std::size_t bytes = frames_bytes(frames);
    if (queue_full(u.frames.size(), u.bytes, bytes)) {
      *error =
          "rank " + std::to_string(peer) + ": " + queue_full_message(u.frames.size(), u.bytes) + " (" + *error + ")";
      return false;
    }
    u.frames.push_back(std::move(frames));
    u.bytes += bytes;
    any_unsent_ = true;
    return true;
  }
  if (c == nullptr) return false;
  try {
    if (queue(*c, frames)) return true;
    *error = "rank " + std::to_string(peer) + ": " + queue_full_message(c->waiting.size(), c->waiting_bytes);
  } catch (const std::exception& e) {
    *error = e.what();
  }
  return false;
}

bool ShmLink::send_reply(const Caller& to, Frames& frames) {
  auto it = accepted_.find(id_of(to.route));
  if (it == accepted_.end() || it->second->broken) return false;  // the caller is gone
  try {
    return queue(*it->second, frames);
  } catch (const std::exception& e) {
    // Closed after the round: this may run inside serve() of the same connection.
    report_dropped(cb_, "a reply to rank " + std::to_string(it->second->rank) + ": " + e.what());
    it->second->broken = true;
    return false;
  }
}

void ShmLink::watch_peer(int peer) {
  std::string ignored;
  bool later = false;
  if (connect_peer(peer, &ignored, &later) == nullptr && later) {  // its listener cannot take it yet: retried
    unsent_[peer].watch = true;
    any_unsent_ = true;
  }
}

void ShmLink::replace_peer(int peer, const std::string& endpoint) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return;
  const bool was_connected = peers_[peer] != nullptr;
  retire_peer(peer);  // a reader may be inside it
  peer_endpoints_[peer] = endpoint;
  peer_down_[peer].clear();
  unsent_[peer] = Unsent{};  // for the earlier process, whose calls failed with it
  if (was_connected && !endpoint.empty()) watch_peer(peer);
}

std::unique_ptr<Channel> ShmLink::open_channel(int peer, const std::string& endpoint, Clock::time_point deadline,
                                               const std::function<bool()>& abandon) {
  Hello h;
  h.capacity = options_.ring_bytes;
  h.kind = "channel";
  h.rank = options_.rank;
  // Nobody listening means the process is gone (its address was published): not waited for
  // long. A full backlog or an unanswered handshake is a busy process: waited for until the
  // call's deadline.
  const auto absent = std::min(deadline, Clock::now() + kHandshakeWait);
  try {
    RingPair p = open_ring_pair(path_of(endpoint), h, -1, "rank " + std::to_string(peer), absent, deadline, abandon);
    finish_ring_pair(p, deadline, abandon);
    return std::make_unique<ShmChannel>(std::move(p), options_);
  } catch (const ListenerBusy& e) {  // busy past the call's deadline
    throw TimeoutError(std::string("shared memory: a channel to rank ") + std::to_string(peer) + ": " + e.what());
  } catch (const TimeoutError& e) {
    if (Clock::now() < deadline)  // nobody listens at its published address
      throw TransportError(std::string("shared memory: a channel to rank ") + std::to_string(peer) + ": " + e.what() +
                           " (the process is gone)");
    throw;
  } catch (const TransportError&) {
    throw;
  } catch (const std::exception& e) {
    throw TransportError(std::string("shared memory: a channel to rank ") + std::to_string(peer) + ": " + e.what());
  }
}

// ------------------------------------------------------------------ the I/O thread

bool ShmLink::read_one(Conn& c) {
  Frames frames;
  const Received got = c.decoder.next(c.pair.in, frames);
  if (got == Received::Nothing) return false;
  if (got == Received::TooManyParts) {
    report_dropped(cb_, (c.outgoing ? "a reply from rank " : "a request from rank ") + std::to_string(c.rank) + ": " +
                            c.decoder.dropped());
    return true;
  }
  bytes_received_.fetch_add(frames_bytes(frames), std::memory_order_relaxed);
  if (c.outgoing) {
    guarded(cb_, "reading a reply", [&] { cb_.on_reply(c.rank, std::move(frames)); });
  } else {
    Caller from{route_of(c.id), c.rank};
    guarded(cb_, "serving a request", [&] { cb_.on_request(std::move(from), std::move(frames)); });
  }
  return true;
}

bool ShmLink::serve(Conn& c) {
  bool moved = false;
  if (const auto lock = lock_out(c, true); lock.owns_lock()) moved = pump(c);    // else a caller writes: next round
  for (int n = 0; n < kDrainCap && !c.broken && read_one(c); ++n) moved = true;  // a turn each, in fairness
  return moved;
}

void ShmLink::drain(Conn& c) {
  {
    const auto lock = lock_out(c);
    pump(c);
  }
  const std::uint64_t end = c.pair.in.position() + c.pair.in.readable();  // published before the close
  while (!c.broken && c.pair.in.position() < end && read_one(c)) {}
}

bool ShmLink::serve_all() {
  bool any = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (!peers_[i]) continue;
    try {
      any = serve(*peers_[i]) || any;
    } catch (const std::exception& e) {
      peer_lost(static_cast<int>(i), std::string("its ring is unusable: ") + e.what());
    }
  }
  std::vector<std::uint64_t> broken;
  for (auto& [id, c] : accepted_) {  // nothing erases from accepted_ inside this loop
    try {
      any = serve(*c) || any;
    } catch (const std::exception& e) {
      report_dropped(cb_, "a shared-memory connection from rank " + std::to_string(c->rank) + ": " + e.what());
      c->broken = true;
    }
    if (c->broken) broken.push_back(id);
  }
  for (auto id : broken) close_accepted(id, "");
  retired_.clear();
  return any;
}

void ShmLink::close_accepted(std::uint64_t id, const std::string& why) {
  auto it = accepted_.find(id);
  if (it == accepted_.end()) return;
  beater_.remove(id);
  if (!why.empty())
    DISTRL_LOG(Debug, "shared memory: closing a connection from rank " << it->second->rank << ": " << why);
  {
    std::lock_guard<std::mutex> lock(routes_mu_);
    routes_.erase(id);
  }
  close_slot(*it->second->slot);
  retired_.push_back(std::move(it->second));
  accepted_.erase(it);
}

void ShmLink::peer_lost(int peer, const std::string& why) {
  retire_peer(peer);
  unsent_[peer] = Unsent{};  // their calls fail with the peer (on_peer_down)
  if (!peer_down_[peer].empty()) return;
  peer_down_[peer] = why;
  guarded(cb_, "reporting a lost peer", [&] { cb_.on_peer_down(peer, why); });
}

// Every second: look at the peers' beats (raised by their Beater), and drop connections that
// never said hello. After this thread was held (a long handler), a peer that beat meanwhile has
// a new beat: only one that did not beat for the whole timeout is reported.
void ShmLink::heartbeats(Clock::time_point now) {
  for (std::size_t i = handshaking_.size(); i-- > 0;)
    if (now - handshaking_[i].since > kHandshakeWait) {
      report_dropped(cb_, "a shared-memory connection that sent no handshake for 2 s");
      handshaking_.erase(handshaking_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  for (std::size_t p = 0; p < peers_.size(); ++p) {
    Conn* c = peers_[p].get();
    if (c == nullptr) continue;
    const std::uint64_t beat = c->pair.in.control()->writer_beat.load(std::memory_order_relaxed);
    if (beat != c->beat) {
      c->beat = beat;
      c->beat_seen = now;
      if (c->stalled) {
        c->stalled = false;
        peer_down_[p].clear();
        open_slot(static_cast<int>(p));
        if (cb_.on_peer_up) guarded(cb_, "reporting a peer back", [&] { cb_.on_peer_up(static_cast<int>(p)); });
      }
    } else if (!c->stalled && now - c->beat_seen > options_.heartbeat_timeout && peer_down_[p].empty()) {
      c->stalled = true;  // the connection stays: a stopped process that runs again is back
      close_slot(slots_[p]);
      peer_down_[p] = "no heartbeat from " + peer_endpoints_[p] + " for " +
                      std::to_string(options_.heartbeat_timeout.count() / 1000) + " s (the process is stopped or hung)";
      guarded(cb_, "reporting a lost peer", [&] { cb_.on_peer_down(static_cast<int>(p), peer_down_[p]); });
    }
  }
}

void ShmLink::accept_all() {
  for (;;) {
    try {
      UnixSocket c = listener_.accept(Clock::now());
      if (!c) return;
      if (accepted_.size() + handshaking_.size() >= kMaxAccepted) {
        report_dropped(
            cb_, "a shared-memory connection: " + std::to_string(kMaxAccepted) + " are open already (closed at once)");
        continue;
      }
      handshaking_.push_back(Handshake{std::move(c), Clock::now()});
    } catch (const OutOfDescriptors& e) {
      // The connection stays in the backlog, and poll(2) would report the listener again at
      // once: with the reserve descriptor set free, accept it and close it (its caller reads
      // EOF and may try again), until the backlog is empty.
      bool refused = false;
      if (reserve_.get() < 0) reserve_ = reserve_descriptor();  // lost last time
      if (reserve_.get() >= 0) {
        ::close(reserve_.release());
        refused = listener_.refuse_one();
        reserve_ = reserve_descriptor();
      }
      if (refused) ++refused_no_descriptor_;
      if (refused_no_descriptor_ <= 1 || refused_no_descriptor_ % 1000 == 0)
        report_dropped(cb_, "a shared-memory connection (" + std::to_string(refused_no_descriptor_) +
                                " refused so far): " + e.what());
      if (refused && reserve_.get() >= 0) continue;
      accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);  // none to spare: look again later
      return;
    } catch (const std::exception& e) {
      report_dropped(cb_, std::string("a shared-memory connection: ") + e.what());
    }
  }
}

void ShmLink::admit(std::size_t index) {
  UnixSocket s = std::move(handshaking_[index].socket);
  handshaking_.erase(handshaking_.begin() + static_cast<std::ptrdiff_t>(index));
  try {
    Hello h;
    RingPair p = admit_ring_pair(std::move(s), &h, "a peer", Clock::now() + std::chrono::milliseconds(100));
    answer_ring_pair(p, io_.wake_fd());
    auto c = std::make_unique<Conn>(std::move(p), options_, h.rank, false);
    c->id = ++next_id_;
    c->io = h.kind == "io";
    if (c->io) beater_.add(c->id, &c->pair.out.control()->writer_beat);
    c->own_slot = std::make_shared<Slot>();  // other threads write their replies into it themselves
    c->slot = c->own_slot.get();
    c->slot->conn = c.get();
    {
      std::lock_guard<std::mutex> lock(routes_mu_);
      routes_.emplace(c->id, c->own_slot);
    }
    accepted_.emplace(c->id, std::move(c));
  } catch (const std::exception& e) {
    report_dropped(cb_, std::string("a shared-memory connection's handshake: ") + e.what());
  }
}

void ShmLink::wait_for_events(int timeout_ms) {
  fds_.clear();
  poll_ids_.clear();
  fds_.push_back({io_.wake_fd(), POLLIN, 0});
  fds_.push_back({listener_.fd(), static_cast<short>(Clock::now() < accept_paused_until_ ? 0 : POLLIN), 0});
  for (auto& h : handshaking_) fds_.push_back({h.socket.fd(), POLLIN, 0});
  for (auto& [id, c] : accepted_) {
    fds_.push_back({c->pair.socket.fd(), POLLRDHUP, 0});
    poll_ids_.push_back(id);
  }
  poll_peers_.clear();
  for (std::size_t p = 0; p < peers_.size(); ++p) {
    if (!peers_[p]) continue;
    fds_.push_back(
        {peers_[p]->pair.socket.fd(), static_cast<short>(peers_[p]->answered ? POLLRDHUP : POLLIN | POLLRDHUP), 0});
    poll_peers_.push_back({static_cast<int>(p), peers_[p].get()});
  }
  // Before sleeping, ask every ring to wake us (their writers write our eventfd), then look
  // once more: what arrived before the request is seen here, what arrives after wakes us.
  std::vector<Doorbell*> armed;
  if (timeout_ms > 0) {
    bool ready = false;
    auto arm = [&](Conn& c) {
      armed.push_back(&c.pair.in.control()->data_bell);
      const auto lock = lock_out(c, true);
      if (!lock.owns_lock()) ready = true;  // a caller is writing: look again at once, never wait for it
      else if (!c.writer.idle()) armed.push_back(&c.pair.out.control()->space_bell);
    };
    for (auto& [id, c] : accepted_) arm(*c);
    for (auto& c : peers_)
      if (c) arm(*c);
    for (auto* b : armed) b->waiters.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the announcements before the re-check
    auto check = [&](Conn& c) {
      if (ready || c.pair.in.readable() > 0) {
        ready = true;
        return;
      }
      const auto lock = lock_out(c, true);
      ready = !lock.owns_lock() || (!c.writer.idle() && c.pair.out.writable() > 0);
    };
    try {
      for (auto& [id, c] : accepted_) check(*c);
      for (auto& c : peers_)
        if (c) check(*c);
    } catch (const std::exception&) {
      ready = true;  // a corrupt index: the next round's read names it
    }
    if (io_.going_to_sleep() || ready) timeout_ms = 0;
  }
  const int n = ::poll(fds_.data(), fds_.size(), timeout_ms);
  io_.woke(n > 0 && (fds_[0].revents & POLLIN) != 0);  // posted tasks and rings alike
  for (auto* b : armed) b->waiters.fetch_sub(1, std::memory_order_relaxed);
  if (n <= 0) return;
  for (std::size_t i = fds_.size(); i-- > 0;)  // back to front: admit() erases handshakes
    if (fds_[i].revents != 0) on_socket_events(i, fds_[i].revents);
}

void ShmLink::on_socket_events(std::size_t i, short revents) {
  const std::size_t shakes = handshaking_.size(), first_accepted = 2 + shakes,
                    first_peer = first_accepted + poll_ids_.size();
  if (i == 0) {
    // drained by woke(): the loop runs the tasks and reads the rings next round
  } else if (i == 1) {
    accept_all();
  } else if (i < first_accepted) {
    admit(i - 2);
  } else if (i < first_peer) {
    // What the caller wrote before it closed (one-way notices at its shutdown) is read first.
    auto it = accepted_.find(poll_ids_[i - first_accepted]);
    if (it != accepted_.end()) guarded(cb_, "reading a closed connection", [&] { drain(*it->second); });
    close_accepted(poll_ids_[i - first_accepted], "the caller closed it");
  } else {
    const auto [p, conn] = poll_peers_[i - first_peer];
    if (peers_[p].get() != conn) return;  // replaced or lost since the poll
    Conn& c = *conn;
    const bool closed = (revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    if (closed && !c.answered && (revents & POLLIN) != 0) {
      try {  // it answered, then closed: an established connection that ended (drained, lost below)
        finish_ring_pair(c.pair, Clock::now() + std::chrono::milliseconds(100));
        c.answered = true;
      } catch (const std::exception&) {}
    }
    if (closed && !c.answered) {
      // Closed before it answered the handshake: the peer refused it (out of descriptors, too
      // many connections), not a death. What was written into its rings is lost (those calls
      // end at their deadlines); the next send connects again after a backoff.
      DISTRL_LOG(Info, "shared memory: rank " << p
                                              << " closed a new connection before answering it (refused: out "
                                                 "of descriptors?); connecting again on the next send");
      retire_peer(p);
      Unsent& u = unsent_[p];
      u.back_off(Clock::now());
      u.watch = true;  // connected again after the backoff, with or without anything to send
      any_unsent_ = true;
    } else if (closed) {
      guarded(cb_, "reading a closed connection", [&] { drain(c); });
      if (peers_[p].get() == conn)
        peer_lost(p, "connection to " + peer_endpoints_[p] + " lost (the process exited or crashed)");
    } else if (!c.answered) {
      try {
        finish_ring_pair(c.pair, Clock::now() + std::chrono::milliseconds(100));
        c.answered = true;
        signal_eventfd(c.pair.peer_wake.get());  // what we wrote before its answer: look now
        open_slot(p);
      } catch (const std::exception& e) {
        peer_lost(p, std::string("its handshake failed: ") + e.what());
      }
    }
  }
}

void ShmLink::run() {
  auto last_activity = Clock::now(), next_check = Clock::now(), next_beat = Clock::now();
  for (;;) {
    bool active = io_.run();
    if (io_.stopping()) break;
    if (serve_all()) {
      active = true;
      if (cb_.on_served) guarded(cb_, "finishing a round of requests", [&] { cb_.on_served(); });
    }
    auto now = Clock::now();
    retry_connects(now);
    if (active) last_activity = now;
    if (!active && now - last_activity >= options_.spin) {
      auto until = std::min(cb_.next_deadline(), now + std::chrono::milliseconds(100));
      if (any_unsent_)
        for (const auto& u : unsent_)
          if (!u.frames.empty() || u.watch) until = std::min(until, u.retry_at);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
      wait_for_events(static_cast<int>(std::max<long long>(1, ms)));
      next_check = Clock::now() + kSocketCheck;
    } else if (now >= next_check) {
      wait_for_events(0);
      next_check = now + kSocketCheck;
    } else {
      cpu_relax();
    }
    now = Clock::now();
    if (now >= next_beat) {
      heartbeats(now);
      next_beat = now + std::chrono::seconds(1);
    }
    guarded(cb_, "checking deadlines", [&] { cb_.on_tick(now); });
  }
  for (std::size_t p = 0; p < peers_.size(); ++p) close_slot(slots_[p]);  // callers hand off from here
  {
    std::lock_guard<std::mutex> lock(routes_mu_);
    routes_.clear();
  }
  for (auto& [id, c] : accepted_) close_slot(*c->slot);
  io_.run();  // last replies and releases go out before the rings close
  // Flush what fits for up to 100 ms; a reader that stopped reading gets nothing more.
  std::vector<Conn*> all;
  for (auto& [id, c] : accepted_) all.push_back(c.get());
  for (auto& c : peers_)
    if (c) all.push_back(c.get());
  for (int round = 0; round < 100; ++round) {
    bool pending = false;
    for (Conn* c : all) {
      try {
        const auto lock = lock_out(*c);
        pump(*c);
        pending = pending || !c->writer.idle();
      } catch (const std::exception&) {}
    }
    if (!pending) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (Conn* c : all) c->pair.out.close();
  beater_.stop();  // before the rings it beats on are unmapped
  accepted_.clear();
  peers_.clear();
  handshaking_.clear();
  retired_.clear();
  listener_.close();
}

}  // namespace distrl::transport::detail
