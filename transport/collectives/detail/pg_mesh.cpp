#include "transport/collectives/detail/pg_mesh.h"

#include <unistd.h>

#include <cstring>
#include <iterator>

#include <zmq_addon.hpp>

#include "common/stop_signal.h"
#include "common/log.h"
#include "transport/link/endpoints.h"
#include "transport/zmq/zmq_context.h"

namespace distrl::transport::detail {

namespace {
// A peer whose connection closed may still have messages in flight on its other connection:
// keep reading this long before calling it gone.
constexpr auto kGoneGrace = std::chrono::milliseconds(300);

struct Held {
  std::shared_ptr<SendTracker> tracker;
  std::shared_ptr<const void> keep;
};

void release_held(void*, void* hint) {
  auto* h = static_cast<Held*>(hint);
  if (h->tracker) h->tracker->release();
  delete h;
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

void report_drop(std::atomic<std::uint64_t>& counter, const std::string& what) {
  ++counter;
  static RateLimiter limit(std::chrono::seconds(5));
  long held = 0;
  if (limit.allow(&held))
    DISTRL_LOG(Warn, "process group: dropped " << what << " (" << held << " more since the last notice)");
}
}  // namespace

// The routing id a member's DEALER connects under: a message's src must match it.
std::string pg_identity(int rank, const std::string& key) {
  return "pg-r" + std::to_string(rank) + "-" + member_tag(key, rank);
}

std::optional<PgMessage> admit_pg_message(std::vector<zmq::message_t>& frames, bool whole, int rank,
                                          const std::vector<std::string>& ids, std::string* why) {
  const int world = static_cast<int>(ids.size());
  // [routing id, header, payload]
  PgMessage m;
  const bool framed = whole && frames.size() == 3 && frames[1].size() == sizeof(PgHeader);
  if (framed) std::memcpy(&m.h, frames[1].data(), sizeof(PgHeader));
  if (!framed || m.h.magic != kPgMagic || m.h.src < 0 || m.h.src >= world || m.h.src == rank ||
      m.h.kind > static_cast<std::uint8_t>(PgKind::Abort)) {
    *why = "a malformed message (" + std::to_string(frames.size()) + " frames" + (framed ? ", bad header" : "") + ")";
    return std::nullopt;
  }
  if (frames[0].to_string_view() !=
      ids[static_cast<std::size_t>(m.h.src)]) {  // a stranger, or a member posing as another
    *why = "a message claiming to come from rank " + std::to_string(m.h.src) + " on a connection that is not rank " +
           std::to_string(m.h.src) + "'s";
    return std::nullopt;
  }
  m.payload = std::move(frames[2]);
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
  zmq::socket_t dealer;
  zmq::socket_t monitor;
  std::mutex send_mu;
};

Mesh::Mesh(Store& store, const std::string& prefix, int rank, int world, const ProcessGroupOptions& options,
           const std::string& shm_offer)
    : rank_(rank), world_(world), options_(options), ctx_(shared_zmq_context()),
      router_(*ctx_, zmq::socket_type::router), gone_since_(world) {
  // The sockets carry point-to-point calls always and collectives unless the world runs them in
  // shared memory (shm: ZeroMQ's same-host ipc form).
  const Transport chosen = parse_transport(options_.transport, "process group");
  const Transport transport = zmq_transport(chosen);
  apply_common_options(router_, 2000);
  secure_server(*ctx_, router_);
  router_.set(zmq::sockopt::rcvhwm, 0);
  // No ZMQ_ROUTER_HANDOVER here (the RPC ROUTER has it): a group does not wait for a stalled rank
  // to come back (its collectives fail at the drop), so no member reconnects under its own id,
  // and an id in use is never taken over.
  // A frame over the limit closes that connection inside ZeroMQ before any byte is kept.
  router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_message_bytes));
  // Bind where the store's host can reach us (the store runs on rank 0's host).
  std::string ip = options_.bind_host;
  if (ip.empty()) {
    const std::string& ep = store.endpoint();  // tcp://host:port
    const auto start = ep.find("://"), colon = ep.rfind(':');
    ip = local_address_towards(start == std::string::npos || colon <= start ? "127.0.0.1"
                                                                            : ep.substr(start + 3, colon - start - 3));
  }
  std::vector<std::string> bound;
  for (const auto& ep : endpoints_to_bind(transport, ip, prefix + "-" + std::to_string(rank), &ipc_path_)) {
    router_.bind(ep);
    bound.push_back(router_.get(zmq::sockopt::last_endpoint));
  }
  RegisteredPathGuard ipc_file(ipc_path_);  // a rendezvous that throws leaves no slot behind
  Address me = make_address(rank_name(rank), transport, bound);
  me.shm = shm_offer;
  const auto peers = exchange_addresses(store, prefix + "/addr/", rank, world, me, options_.timeout);
  const std::string key = world_member_key(store, prefix + "/member_key", rank, options_.timeout);
  for (int r = 0; r < world; ++r) ids_.push_back(pg_identity(r, key));
  shm_world_ = world > 1 && world_uses_shm(me, peers, chosen) && peers[0].shm.rfind("shm://", 0) == 0;
  if (shm_world_) shm_address_ = peers[0].shm;
  for (const auto& p : peers) {
    host_ids_.push_back(p.host_id);
    shm_offered_.push_back(!p.shm.empty());
  }

  items_.push_back({router_.handle(), 0, ZMQ_POLLIN, 0});
  peers_.resize(world);
  endpoints_.resize(world);
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    endpoints_[r] = endpoint_for(me, peers[r], transport);
    auto p = std::make_unique<Peer>();
    p->dealer = zmq::socket_t(*ctx_, zmq::socket_type::dealer);
    apply_common_options(p->dealer, 2000);
    secure_client(p->dealer);
    p->dealer.set(zmq::sockopt::sndhwm, 0);
    p->dealer.set(zmq::sockopt::routing_id, ids_[rank]);
    watch_connection(*ctx_, p->dealer, p->monitor,
                     "pg-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-" + std::to_string(r));
    p->dealer.connect(endpoints_[r]);
    items_.push_back({p->monitor.handle(), 0, ZMQ_POLLIN, 0});
    peers_[r] = std::move(p);
  }
  ipc_file.release();  // ~Mesh removes it
}

Mesh::~Mesh() {
  for (int r = 0; r < world_; ++r) {
    if (!peers_[r]) continue;
    if (gone_since_[r]) peers_[r]->dealer.set(zmq::sockopt::linger, 0);  // nobody will read what is queued
    unwatch_connection(peers_[r]->dealer, peers_[r]->monitor);
  }
  router_.close();
  if (!ipc_path_.empty()) {
    ::unlink(ipc_path_.c_str());
    forget_on_fatal_signal(ipc_path_.c_str());
  }
}

void Mesh::send(int dst, const PgHeader& h, const void* data, std::size_t bytes,
                const std::shared_ptr<const void>& keep, const std::shared_ptr<SendTracker>& tracker) {
  if (bytes > options_.max_message_bytes)
    throw TransportError("process group: a message of " + std::to_string(bytes) + " bytes to rank " +
                         std::to_string(dst) + " exceeds max_message_bytes (" +
                         std::to_string(options_.max_message_bytes) +
                         "); raise ProcessGroupOptions::max_message_bytes on every rank, or send it in parts");
  if (dst < 0 || dst >= world_ || dst == rank_)
    throw Error("process group: cannot send to rank " + std::to_string(dst) + " (world of " + std::to_string(world_) +
                ", this is rank " + std::to_string(rank_) + ")");
  zmq::message_t head(&h, sizeof(h));
  zmq::message_t body;
  if (bytes < kCopyBelow || !tracker) {
    body = zmq::message_t(data, bytes);
  } else {
    tracker->add();
    body = zmq::message_t(const_cast<void*>(data), bytes, &release_held, new Held{tracker, keep});
  }
  Peer& p = *peers_[dst];
  std::lock_guard<std::mutex> lock(p.send_mu);
  try {
    if (!send_nointr(p.dealer, head, zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !send_nointr(p.dealer, body, zmq::send_flags::dontwait))
      throw TransportError("process group: the send queue to rank " + std::to_string(dst) + " is full");
  } catch (const zmq::error_t& e) {
    throw TransportError("process group: send to rank " + std::to_string(dst) + " failed: " + e.what());
  }
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
      send(m, h, payload.data(), payload.size(), {}, nullptr);
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
  const std::string msg = what + ": the group was aborted by rank " + std::to_string(a.from) + ": " + a.reason;
  if (a.type == "MismatchError") throw MismatchError(msg);
  if (a.type == "TimeoutError") throw TimeoutError(msg);
  throw TransportError(msg);
}

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
    if (gone_since_[src] && now - *gone_since_[src] > kGoneGrace)
      throw TransportError(what + ": rank " + std::to_string(src) + " is gone (its connection " + endpoints_[src] +
                           " closed: the process exited or crashed, or its host became unreachable)");
    if (now >= deadline)
      throw TimeoutError(
          what + ": timed out after " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()) +
          " ms waiting for rank " + std::to_string(src) + " (is it running the same sequence of collectives?)");
    const auto until = std::min(deadline, now + std::chrono::milliseconds(100));
    if (!lead_read(lock, until)) cv_.wait_until(lock, until);
  }
}

bool Mesh::lead_read(std::unique_lock<std::mutex>& lock, Clock::time_point until) {
  if (reading_) return false;
  reading_ = true;
  lock.unlock();
  std::exception_ptr failed;
  try {
    read_sockets(until);
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  reading_ = false;  // always released, or every other waiter would stall until its deadline
  cv_.notify_all();
  if (failed) std::rethrow_exception(failed);
  return true;
}

std::optional<PgMessage> Mesh::try_recv(std::uint32_t group, int src, std::int32_t tag) {
  const Key key{group, src, tag};
  std::unique_lock<std::mutex> lock(mu_);
  if (auto m = take(key)) return m;
  if (!lead_read(lock, Clock::now())) return std::nullopt;
  return take(key);
}

void Mesh::read_sockets(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  poll_nointr(items_.data(), items_.size(), std::chrono::milliseconds(std::max<long>(0, left.count())));
  std::vector<PgMessage> got;
  if (items_[0].revents & ZMQ_POLLIN) {
    for (;;) {
      std::vector<zmq::message_t> frames;
      const Received read = recv_bounded(router_, frames, 4);  // a fourth frame marks it malformed
      if (read == Received::Nothing) break;
      std::string why;
      auto m = admit_pg_message(frames, read == Received::Message, rank_, ids_, &why);
      if (!m) {
        report_drop(bad_messages_, why);
        continue;
      }
      got.push_back(std::move(*m));
    }
  }
  std::vector<std::pair<int, int>> events;
  for (std::size_t i = 1; i < items_.size(); ++i) {
    if (!(items_[i].revents & ZMQ_POLLIN)) continue;
    const int peer = static_cast<int>(i) - 1 < rank_ ? static_cast<int>(i) - 1 : static_cast<int>(i);  // self has none
    read_connection_events(peers_[peer]->monitor, [&](int ev) { events.emplace_back(peer, ev); });
  }
  if (got.empty() && events.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : got) {
    if (m.h.kind == static_cast<std::uint8_t>(PgKind::Abort)) {
      const std::string text(static_cast<const char*>(m.payload.data()), m.payload.size());
      const auto nl = text.find('\n');
      aborts_.emplace(
          m.h.group, Abort{m.h.src, text.substr(0, nl), nl == std::string::npos ? text : text.substr(nl + 1), m.h.seq});
    } else if (queued_bytes_ + m.payload.size() > options_.max_queued_bytes) {
      report_drop(bad_messages_, "a message of " + std::to_string(m.payload.size()) + " bytes from rank " +
                                     std::to_string(m.h.src) + ": " + std::to_string(queued_bytes_) +
                                     " bytes wait unread already (ProcessGroupOptions::max_queued_bytes)");
    } else {
      queued_bytes_ += m.payload.size();
      mailboxes_[Key{m.h.group, m.h.src, m.h.tag}].push_back(std::move(m));
    }
  }
  for (auto [peer, ev] : events) {
    if (ev == ZMQ_EVENT_DISCONNECTED) {
      if (!gone_since_[peer]) gone_since_[peer] = Clock::now();
    } else {
      gone_since_[peer].reset();
    }
  }
}

}  // namespace distrl::transport::detail
