#include "transport/collectives/detail/pg_mesh.h"

#include <unistd.h>

#include <cstring>
#include <random>

#include "common/log.h"
#include "common/stop_signal.h"
#include "transport/link/endpoints.h"
#include "transport/link/world_links.h"

namespace distrl::transport::detail {

namespace {
// A peer whose connection closed may still have messages in flight on its other connection:
// keep reading this long before calling it gone.
constexpr auto kGoneGrace = std::chrono::milliseconds(300);
// How long a best-effort send (an abort notice) waits for another thread's send to the same rank.
constexpr auto kBestEffortWait = std::chrono::milliseconds(100);

// What a zero-copy send holds until the link is done with the bytes: their owner, and the
// tracker that counts the send (released when the last reference goes).
struct Held {
  std::shared_ptr<SendTracker> tracker;
  std::shared_ptr<const void> keep;
  Held(std::shared_ptr<SendTracker> t, std::shared_ptr<const void> k) : tracker(std::move(t)), keep(std::move(k)) {
    tracker->add();
  }
  Held(Held&& o) noexcept = default;  // the moved-from one holds no tracker
  Held& operator=(Held&&) = delete;
  ~Held() {
    if (tracker) tracker->release();
  }
};

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// Whether the whole world runs its collectives in shared memory: more than one rank, every rank
// on this host offering it, rank 0 with a segment.
bool collectives_in_shm(const Address& me, const std::vector<Address>& peers) {
  if (peers.size() < 2 || peers[0].collectives.rfind("shm://", 0) != 0) return false;
  for (const auto& p : peers)
    if (p.host_id != me.host_id || p.collectives.empty()) return false;
  return true;
}

}  // namespace

std::optional<PgMessage> admit_pg_message(Frames& frames, int from, int rank, int world, std::string* why) {
  // [header, payload]
  PgMessage m;
  const bool framed = frames.size() == 2 && frames[0].size() == sizeof(PgHeader);
  if (framed) std::memcpy(&m.h, frames[0].data(), sizeof(PgHeader));
  if (!framed || m.h.magic != kPgMagic || m.h.src < 0 || m.h.src >= world || m.h.src == rank ||
      m.h.kind > static_cast<std::uint8_t>(PgKind::Abort)) {
    *why = "a malformed message (" + std::to_string(frames.size()) + " frames" + (framed ? ", bad header" : "") + ")";
    return std::nullopt;
  }
  if (from != m.h.src) {  // a stranger, or a member posing as another
    *why = "a message claiming to come from rank " + std::to_string(m.h.src) + " on a connection that is " +
           (from < 0 ? std::string("no member's") : "rank " + std::to_string(from) + "'s");
    return std::nullopt;
  }
  m.payload = std::move(frames[1]);
  return m;
}

void SendTracker::add() {
  std::lock_guard<std::mutex> lock(mu_);
  ++pending_;
}

void SendTracker::release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--pending_ == 0) cv_.notify_all();
}

bool SendTracker::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ == 0;
}

bool SendTracker::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return pending_ == 0; });
}

struct Mesh::Peer {
  std::timed_mutex mu;  // one sending thread at a time
  std::unique_ptr<Channel> channel;
};

Link::Events Mesh::events() {
  Link::Events cb;
  cb.on_request = [this](Caller&& from, Frames&& frames) { on_request(std::move(from), std::move(frames)); };
  cb.on_reply = [this](int peer, Frames&&) {
    count_bad("a reply from rank " + std::to_string(peer) + " (none is asked)");
  };
  cb.on_peer_down = [this](int peer, const std::string& why) { on_peer(peer, true, why); };
  cb.on_peer_up = [this](int peer) { on_peer(peer, false, ""); };
  cb.on_tick = [](Clock::time_point) {};
  cb.next_deadline = [] { return Clock::time_point::max(); };
  cb.on_dropped = [this](const std::string& what) { count_bad(what); };
  cb.concurrent = true;  // each callback locks mu_ (or touches only atomics)
  return cb;
}

Mesh::Mesh(Store& store, const std::string& prefix, int rank, int world, const ProcessGroupOptions& options,
           const std::string& collectives_offer)
    : rank_(rank), world_(world), options_(options), gone_since_(world), gone_why_(world) {
  // The links RPC would make for this world (link/world_links.h), with the group's limits: a
  // message is [header, payload].
  LinkSettings l;
  l.what = "process group";
  l.name = rank_name(rank);
  l.rank = rank;
  l.transport = parse_transport(options_.transport, "process group");
  if (l.transport != Transport::Shm) {
    // Where the store's host can reach us (the store runs on rank 0's host).
    l.bind_ip = options_.bind_host;
    if (l.bind_ip.empty()) {
      const std::string& ep = store.endpoint();  // tcp://host:port
      const auto start = ep.find("://"), colon = ep.rfind(':');
      l.bind_ip = local_address_towards(
          start == std::string::npos || colon <= start ? "127.0.0.1" : ep.substr(start + 3, colon - start - 3));
    }
  }
  l.zmq.max_frame_bytes = std::max(options_.max_message_bytes, sizeof(PgHeader));
  l.zmq.max_parts = 3;                                     // routing id, header, payload
  l.zmq.channel_linger = std::chrono::milliseconds(2000);  // a group destroyed after its last send
  l.shm.max_message_bytes = options_.max_message_bytes + sizeof(PgHeader);
  l.shm.max_parts = 2;
  l.shm.send_timeout = options_.timeout;
  const Link::Events cb = events();
  WorldLinks links(std::move(l), cb);
  Address me = links.me();
  me.collectives = collectives_offer;
  ipc_path_ = links.ipc_path();
  RegisteredPathGuard ipc_file(ipc_path_);  // a rendezvous that throws leaves no slot behind
  const auto peers = exchange_addresses(store, prefix + "/addr/", rank, world, me, options_.timeout);
  std::random_device rd;
  links.set_member_key(world_member_key(store, prefix + "/member_key", rank, options_.timeout),
                       (static_cast<std::uint64_t>(rd()) << 32) | rd());
  endpoints_ = links.endpoints(peers);
  shm_world_ = collectives_in_shm(me, peers);
  if (shm_world_) shm_address_ = peers[0].collectives;
  for (const auto& p : peers) {
    host_ids_.push_back(p.host_id);
    shm_offered_.push_back(!p.collectives.empty());
  }
  for (int r = 0; r < world; ++r) peers_.push_back(std::make_unique<Peer>());
  link_ = links.take(endpoints_, cb);
  link_->set_peers(endpoints_);
  try {
    link_->start();
  } catch (...) {
    link_->stop();  // a half-started link's thread must not run on into this object's members
    throw;
  }
  ipc_file.release();  // ~Mesh removes it
  // Every peer watched from now on: its death is reported even while nothing is sent to it.
  link_->post([this] {
    for (int r = 0; r < world_; ++r)
      if (r != rank_) link_->watch_peer(r);
  });
}

Mesh::~Mesh() {
  for (auto& p : peers_) p->channel.reset();  // ZeroMQ's send what they queued (linger), shared memory's did
  link_->stop();
  if (!ipc_path_.empty()) {
    ::unlink(ipc_path_.c_str());
    forget_on_fatal_signal(ipc_path_.c_str());
  }
}

void Mesh::send(int dst, const PgHeader& h, const void* data, std::size_t bytes,
                const std::shared_ptr<const void>& keep, const std::shared_ptr<SendTracker>& tracker,
                bool best_effort) {
  if (bytes > options_.max_message_bytes)
    throw TransportError("process group: a message of " + std::to_string(bytes) + " bytes to rank " +
                         std::to_string(dst) + " exceeds max_message_bytes (" +
                         std::to_string(options_.max_message_bytes) +
                         "); raise ProcessGroupOptions::max_message_bytes on every rank, or send it in parts");
  if (dst < 0 || dst >= world_ || dst == rank_)
    throw Error("process group: cannot send to rank " + std::to_string(dst) + " (world of " + std::to_string(world_) +
                ", this is rank " + std::to_string(rank_) + ")");
  Frames frames;
  frames.reserve(2);
  frames.emplace_back(&h, sizeof(h));
  if (bytes < kCopyBelow || !tracker) frames.emplace_back(data, bytes);
  else frames.push_back(Frame::sharing(data, bytes, Held(tracker, keep)));
  Peer& p = *peers_[dst];
  std::unique_lock<std::timed_mutex> lock(p.mu, std::defer_lock);
  if (!best_effort) lock.lock();
  else if (!lock.try_lock_for(kBestEffortWait))  // a send that waits for room in a full ring
    throw TransportError("another thread has been sending to rank " + std::to_string(dst) + " for " +
                         std::to_string(kBestEffortWait.count()) + " ms");
  try {
    if (!p.channel) {
      p.channel = link_->open_channel(dst, endpoints_[dst], Clock::now() + options_.timeout, [this, dst] {
        std::lock_guard<std::mutex> lock(mu_);
        return gone(dst, Clock::now());
      });
    }
  } catch (const std::exception& e) {
    throw TransportError("process group: no connection to rank " + std::to_string(dst) + ": " + e.what());
  }
  bool sent = false;
  try {
    sent = p.channel->send(frames);
  } catch (const std::exception& e) {
    p.channel.reset();  // a message may be half written into it: the next send takes a new one
    throw TransportError("process group: send to rank " + std::to_string(dst) + " failed: " + e.what());
  }
  if (!sent) throw TransportError("process group: the send queue to rank " + std::to_string(dst) + " is full");
}

void Mesh::send_abort(std::uint32_t group, const std::vector<int>& members, const std::string& type,
                      const std::string& reason, std::uint64_t seq) {
  PgHeader h;
  h.magic = kPgMagic;
  h.kind = static_cast<std::uint8_t>(PgKind::Abort);
  h.src = rank_;
  h.group = group;
  h.seq = seq;
  const std::string payload = type + "\n" + reason;
  for (int m : members) {
    if (m == rank_) continue;
    try {
      send(m, h, payload.data(), payload.size(), {}, nullptr, true);
    } catch (const std::exception& e) {
      DISTRL_LOG(Debug, "process group: abort notice to rank " << m << " not sent: " << e.what());
    }
  }
}

std::optional<PgMessage> Mesh::take(const Key& k) {
  auto it = mailboxes_.find(k);
  if (it == mailboxes_.end() || it->second.empty()) return std::nullopt;
  PgMessage m = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) mailboxes_.erase(it);  // keys a sender made up do not stay either
  queued_bytes_ -= m.payload.size();
  return m;
}

void Mesh::throw_abort(std::uint32_t group, const std::string& what) {
  const Abort& a = aborts_.at(group);
  const std::string msg = what + ": " +
                          (a.from == rank_ ? "" : "the group was aborted by rank " + std::to_string(a.from) + ": ") +
                          a.reason;
  if (a.type == "MismatchError") throw MismatchError(msg);
  if (a.type == "TimeoutError") throw TimeoutError(msg);
  throw TransportError(msg);
}

bool Mesh::gone(int peer, Clock::time_point now) { return gone_since_[peer] && now - *gone_since_[peer] > kGoneGrace; }

PgMessage Mesh::recv(std::uint32_t group, int src, std::int32_t tag, Clock::time_point deadline,
                     const std::string& what, std::uint64_t seq) {
  if (src < 0 || src >= world_ || src == rank_) throw Error(what + ": cannot receive from rank " + std::to_string(src));
  const Key key{group, src, tag};
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (auto m = take(key)) return std::move(*m);
    if (auto a = aborts_.find(group); a != aborts_.end() && (seq == 0 || a->second.seq == 0 || seq >= a->second.seq))
      throw_abort(group, what);
    const auto now = Clock::now();
    if (gone(src, now))
      throw TransportError(what + ": rank " + std::to_string(src) + " is gone (" +
                           (gone_why_[src].empty() ? "its connection " + endpoints_[src] + " closed" : gone_why_[src]) +
                           ")");
    if (now >= deadline)
      throw TimeoutError(
          what + ": timed out after " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) +
          " ms waiting for rank " + std::to_string(src) + " (is it running the same sequence of collectives?)");
    // Woken by a message, an abort or a peer's loss; a peer lost is judged again after its grace.
    cv_.wait_until(lock, std::min(deadline, gone_since_[src] ? now + std::chrono::milliseconds(50) : deadline));
  }
}

std::optional<PgMessage> Mesh::try_recv(std::uint32_t group, int src, std::int32_t tag) {
  std::lock_guard<std::mutex> lock(mu_);
  return take(Key{group, src, tag});
}

void Mesh::count_bad(const std::string& what) {
  ++bad_messages_;
  static RateLimiter limit(std::chrono::seconds(5));
  long held = 0;
  if (limit.allow(&held))
    DISTRL_LOG(Warn, "process group: dropped " << what << " (" << held << " more since the last notice)");
}

void Mesh::on_request(Caller&& from, Frames&& frames) {
  std::string why;
  auto m = admit_pg_message(frames, from.rank, rank_, world_, &why);
  if (!m) return count_bad(why);
  const PgHeader h = m->h;
  std::string dropped;
  std::unique_lock<std::mutex> lock(mu_);
  if (h.kind == static_cast<std::uint8_t>(PgKind::Abort)) {
    const std::string text = m->payload.to_string();
    const auto nl = text.find('\n');
    aborts_.emplace(h.group,
                    Abort{h.src, text.substr(0, nl), nl == std::string::npos ? text : text.substr(nl + 1), h.seq});
  } else if (queued_bytes_ + m->payload.size() > options_.max_queued_bytes) {
    dropped = "a message of " + std::to_string(m->payload.size()) + " bytes from rank " + std::to_string(h.src) + ": " +
              std::to_string(queued_bytes_) + " bytes wait unread already (ProcessGroupOptions::max_queued_bytes)";
  } else {
    queued_bytes_ += m->payload.size();
    mailboxes_[Key{h.group, h.src, h.tag}].push_back(std::move(*m));
  }
  // Last under the lock: from here to call_watch nothing throws, so the call it owes is made.
  const auto mismatch = watched(h);
  lock.unlock();
  cv_.notify_all();
  if (mismatch) call_watch(mismatch, h);
  if (!dropped.empty()) count_bad(dropped);
}

std::function<void(const PgHeader&)> Mesh::watched(const PgHeader& h) {
  if (!watch_ || h.kind != static_cast<std::uint8_t>(PgKind::Data) || h.tag != -1 || h.group != watch_->group ||
      h.seq != watch_->seq)
    return nullptr;
  auto fn = std::move(watch_->on_mismatch);
  watch_.reset();  // spent
  in_watch_call_ = true;
  return fn;
}

void Mesh::call_watch(const std::function<void(const PgHeader&)>& fn, const PgHeader& h) {
  try {
    fn(h);
  } catch (const std::exception& e) {
    DISTRL_LOG(Warn, "process group: reporting a mismatched collective failed: " << e.what());
  } catch (...) {
    DISTRL_LOG(Warn, "process group: reporting a mismatched collective failed with a non-standard exception");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_watch_call_ = false;
  }
  cv_.notify_all();
}

void Mesh::watch_collective(std::uint32_t group, std::uint64_t seq, std::function<void(const PgHeader&)> on_mismatch) {
  std::unique_lock<std::mutex> lock(mu_);
  watch_ = Watch{group, seq, std::move(on_mismatch)};
  // A member's message may have come before this rank started the collective.
  for (const auto& [key, box] : mailboxes_) {
    if (std::get<0>(key) != group || std::get<2>(key) != -1) continue;
    for (const PgMessage& m : box) {
      if (auto fn = watched(m.h)) {
        const PgHeader h = m.h;
        lock.unlock();
        return call_watch(fn, h);
      }
    }
  }
}

void Mesh::unwatch_collective() {
  std::unique_lock<std::mutex> lock(mu_);
  watch_.reset();
  cv_.wait(lock, [&] { return !in_watch_call_; });  // its callback may use what the caller frees next
}

void Mesh::fail_locally(std::uint32_t group, const std::string& type, const std::string& reason, std::uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.emplace(group, Abort{rank_, type, reason, seq});
  }
  cv_.notify_all();
}

void Mesh::on_peer(int peer, bool down, const std::string& why) {
  if (peer < 0 || peer >= world_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!down) gone_since_[peer].reset();
    else if (!gone_since_[peer]) {
      gone_since_[peer] = Clock::now();
      gone_why_[peer] = why;
    }
  }
  cv_.notify_all();
}

}  // namespace distrl::transport::detail
