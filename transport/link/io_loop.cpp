#include "transport/link/io_loop.h"

#include <poll.h>
#include <unistd.h>

#include <zmq_addon.hpp>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "common/error.h"
#include "common/log.h"
#include "transport/link/endpoints.h"
#include "transport/zmq/zmq_context.h"

namespace distrl::transport::detail {

namespace {

// libzmq's errors as the seam's: a TransportError with libzmq's words.
template <typename F>
auto zmq_call(F&& f) {
  try {
    return f();
  } catch (const zmq::error_t& e) {
    throw TransportError(e.what());
  }
}

// The sync fast path's connection: a DEALER the calling thread holds, polled by that thread.
class ZmqChannel final : public Channel {
 public:
  ZmqChannel(std::shared_ptr<zmq::context_t> ctx, const std::string& identity, std::size_t max_frame_bytes,
             const std::string& endpoint, std::chrono::milliseconds linger)
      : ctx_(std::move(ctx)), socket_(*ctx_, zmq::socket_type::dealer) {
    apply_common_options(socket_, static_cast<int>(linger.count()));
    secure_client(socket_);
    socket_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame_bytes));
    socket_.set(zmq::sockopt::routing_id, identity);
    socket_.connect(endpoint);
  }
  bool send(Frames& frames) override {
    return zmq_call([&] { return send_frames_nointr(socket_, frames, zmq::send_flags::dontwait); });
  }
  bool readable(std::chrono::milliseconds wait) override {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    return zmq_call([&] { return poll_nointr(&item, 1, wait) > 0; });
  }
  Received receive(Frames& out, std::size_t max_parts) override {
    return zmq_call([&] { return recv_bounded(socket_, out, max_parts); });
  }

 private:
  std::shared_ptr<zmq::context_t> ctx_;  // outlives the socket
  zmq::socket_t socket_;
};

}  // namespace

struct IoLoop::Peer {
  zmq::socket_t dealer;
  zmq::socket_t monitor;
  bool down = false;
  std::string down_reason;
};

IoLoop::IoLoop(std::shared_ptr<zmq::context_t> ctx, Options options, Callbacks callbacks)
    : ctx_(std::move(ctx)), options_(options), cb_(std::move(callbacks)), router_(*ctx_, zmq::socket_type::router) {
  apply_common_options(router_);
  secure_server(*ctx_, router_);
  router_.set(zmq::sockopt::router_mandatory, 1);  // replies to vanished peers fail instead of vanishing
  // A peer that reconnects under its routing id while its old connection is still here (it was
  // stopped, so the old one's end is not seen yet) takes the id over. libzmq's default ignores
  // the newcomer for good: a readmitted observer then never got the agent's requests.
  router_.set(zmq::sockopt::router_handover, 1);
  router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_frame_bytes));
}

std::string IoLoop::member_identity(int rank, const std::string& key, std::uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(nonce));
  return "rpc-r" + std::to_string(rank) + "-" + member_tag(key, rank) + "-" + hex + "-";
}

void IoLoop::set_member_identity(std::string identity_prefix, std::string member_key) {
  options_.identity_prefix = std::move(identity_prefix);
  options_.member_key = std::move(member_key);
  tags_.clear();
}

int IoLoop::rank_of_identity(const Frame& id) {
  if (options_.member_key.empty()) return -1;
  const std::string_view v = id.view();
  if (v.substr(0, 5) != "rpc-r") return -1;
  long r = 0;
  std::size_t i = 5;
  for (; i < v.size() && i < 12 && v[i] >= '0' && v[i] <= '9'; ++i) r = r * 10 + (v[i] - '0');
  if (i == 5 || i >= v.size() || v[i] != '-') return -1;
  if (r >= static_cast<long>(peers_.size())) return -1;  // no rank of this world
  if (tags_.size() != peers_.size()) tags_.assign(peers_.size(), std::string());
  std::string& tag = tags_[static_cast<std::size_t>(r)];
  if (tag.empty()) tag = member_tag(options_.member_key, static_cast<int>(r));
  return v.substr(i + 1, tag.size()) == tag && v.size() > i + 1 + tag.size() && v[i + 1 + tag.size()] == '-'
             ? static_cast<int>(r)
             : -1;
}

IoLoop::~IoLoop() { stop(); }

std::vector<std::string> IoLoop::bind(const std::vector<std::string>& endpoints) {
  std::vector<std::string> out;
  for (auto& ep : endpoints) {
    try {
      router_.bind(ep);
    } catch (const zmq::error_t& e) {
      throw TransportError("transport: cannot bind " + ep + ": " + e.what());
    }
    out.push_back(router_.get(zmq::sockopt::last_endpoint));
  }
  return out;
}

void IoLoop::set_peers(std::vector<std::string> endpoints) {
  peer_endpoints_ = std::move(endpoints);
  peers_.resize(peer_endpoints_.size());
}

void IoLoop::start() {
  io_.start(options_.thread_init, [this] { run(); });
}

void IoLoop::stop() { io_.stop(); }

bool IoLoop::post(std::function<void()> fn) { return io_.post(std::move(fn)); }

IoLoop::Peer& IoLoop::connect_peer(int peer) {
  auto& p = peers_.at(peer);
  if (p) return *p;
  p = std::make_unique<Peer>(Peer{zmq::socket_t(*ctx_, zmq::socket_type::dealer), zmq::socket_t(), false, {}});
  apply_common_options(p->dealer);
  secure_client(p->dealer);
  if (!options_.identity_prefix.empty())
    p->dealer.set(zmq::sockopt::routing_id, options_.identity_prefix + "io" + std::to_string(connections_made_ + 1));
  p->dealer.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(options_.max_frame_bytes));
  watch_connection(*ctx_, p->dealer, p->monitor,
                   "rpc-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-" + std::to_string(peer) + "-" +
                       std::to_string(++connections_made_));
  p->dealer.connect(peer_endpoints_.at(peer));
  items_dirty_ = true;
  return *p;
}

void IoLoop::watch_peer(int peer) {
  if (peer >= 0 && peer < static_cast<int>(peers_.size())) connect_peer(peer);
}

void IoLoop::replace_peer(int peer, const std::string& endpoint) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return;
  const bool was_connected = peers_[peer] != nullptr;
  if (was_connected) {
    unwatch_connection(peers_[peer]->dealer, peers_[peer]->monitor);
    peers_[peer].reset();
    items_dirty_ = true;  // rebuilt before the next poll: the closed sockets leave the set
  }
  peer_endpoints_[peer] = endpoint;
  if (was_connected && !endpoint.empty()) connect_peer(peer);
}

bool IoLoop::send_to_peer(int peer, Frames& frames, std::string* error) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) {
    *error = "no such rank " + std::to_string(peer);
    return false;
  }
  Peer& p = connect_peer(peer);
  if (p.down) {
    *error = p.down_reason;
    return false;
  }
  try {
    mark(p.dealer.handle());  // sending may take in the signal of a reply that already came
    const std::size_t bytes = frames_bytes(frames);
    if (send_frames_nointr(p.dealer, frames, zmq::send_flags::dontwait)) {
      bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
      return true;
    }
    *error = "send queue full (peer not reading?)";
  } catch (const zmq::error_t& e) {
    *error = e.what();
  }
  return false;
}

bool IoLoop::send_reply(const Caller& to, Frames& frames) {
  mark(router_.handle());  // sending may take in the signal of a request that already came
  try {
    send_nointr(router_, zmq::const_buffer(to.route.data(), to.route.size()),
                zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    const std::size_t bytes = frames_bytes(frames);
    if (!send_frames_nointr(router_, frames, zmq::send_flags::dontwait)) return false;
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    return true;
  } catch (const zmq::error_t&) {
    return false;  // EHOSTUNREACH: the caller is gone
  }
}

// ZeroMQ connects in the background: nothing here waits, the call's wait is bounded by its deadline.
std::unique_ptr<Channel> IoLoop::open_channel(int, const std::string& endpoint, Clock::time_point,
                                              const std::function<bool()>&) {
  const std::string identity = options_.identity_prefix + "c" + std::to_string(++channels_made_);
  return zmq_call([&] {
    return std::make_unique<ZmqChannel>(ctx_, identity, options_.max_frame_bytes, endpoint, options_.channel_linger);
  });
}

void IoLoop::rebuild_poll_items() {
  watched_.clear();
  watched_.push_back({router_.handle(), Source::Router, -1, true});
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (!peers_[i]) continue;
    watched_.push_back({peers_[i]->dealer.handle(), Source::Reply, static_cast<int>(i), true});
    watched_.push_back({peers_[i]->monitor.handle(), Source::Monitor, static_cast<int>(i), true});
  }
  fds_.clear();
  fds_.push_back({io_.wake_fd(), POLLIN, 0});
  for (auto& w : watched_) {
    int fd = -1;
    std::size_t len = sizeof(fd);
    if (zmq_getsockopt(w.socket, ZMQ_FD, &fd, &len) != 0)
      throw TransportError("transport: cannot get a socket's ZMQ_FD");
    fds_.push_back({fd, POLLIN, 0});
  }
  items_dirty_ = false;
}

void IoLoop::mark(void* socket) {
  for (auto& w : watched_)
    if (w.socket == socket) w.check = true;
}

bool IoLoop::serve_marked() {
  bool any = false;
  // Indexes, not iterators: a callback may connect a peer (items_dirty_, rebuilt next round).
  for (std::size_t i = 0; i < watched_.size(); ++i) {
    if (!watched_[i].check) continue;
    watched_[i].check = false;
    const Watched w = watched_[i];
    bool more = false;
    switch (w.source) {
      case Source::Router: more = drain_router(); break;
      case Source::Reply: more = drain_peer(w.peer); break;
      case Source::Monitor: read_monitor(w.peer); break;
    }
    if (more && i < watched_.size()) watched_[i].check = true;  // hit the per-round cap: come back
    any = true;
  }
  return any;
}

bool IoLoop::drain_router() {
  for (int n = 0; n < kDrainCap; ++n) {
    Frames frames;
    const Received got = recv_bounded(router_, frames, options_.max_parts);
    if (got == Received::Nothing) return false;
    if (got == Received::TooManyParts) {
      report_dropped(cb_, "a message of more than " + std::to_string(options_.max_parts - 1) + " frames");
      continue;
    }
    if (frames.size() < 2) continue;  // a routing id alone: nothing to answer
    Caller from{std::move(frames.front()), -1};
    from.rank = rank_of_identity(from.route);
    frames.erase(frames.begin());
    bytes_received_.fetch_add(frames_bytes(frames), std::memory_order_relaxed);
    guarded(cb_, "serving a request", [&] { cb_.on_request(std::move(from), std::move(frames)); });
  }
  return true;
}

bool IoLoop::drain_peer(int peer) {
  for (int n = 0; n < kDrainCap; ++n) {
    Frames frames;
    const Received got = recv_bounded(peers_[peer]->dealer, frames, options_.max_parts - 1);
    if (got == Received::Nothing) return false;
    if (got == Received::TooManyParts) {
      report_dropped(cb_, "a reply of more than " + std::to_string(options_.max_parts - 1) + " frames");
      continue;
    }
    bytes_received_.fetch_add(frames_bytes(frames), std::memory_order_relaxed);
    guarded(cb_, "reading a reply", [&] { cb_.on_reply(peer, std::move(frames)); });
  }
  return true;
}

void IoLoop::read_monitor(int peer) {
  Peer& p = *peers_[peer];
  read_connection_events(p.monitor, [&](int event) {
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      if (p.down && cb_.on_peer_up) guarded(cb_, "reporting a peer back", [&] { cb_.on_peer_up(peer); });
      p.down = false;
    } else if (!p.down) {
      p.down = true;
      p.down_reason = "connection to " + peer_endpoints_[peer] +
                      " lost (the process exited or crashed, or its host became unreachable)";
      guarded(cb_, "reporting a lost peer", [&] { cb_.on_peer_down(peer, p.down_reason); });
    }
  });
}

void IoLoop::run() {
  auto last_activity = Clock::now();
  for (;;) {
    bool active = io_.run();
    if (io_.stopping()) break;
    if (items_dirty_) rebuild_poll_items();
    if (serve_marked()) {
      active = true;
      if (cb_.on_served) guarded(cb_, "finishing a round of requests", [&] { cb_.on_served(); });
    }
    if (items_dirty_) rebuild_poll_items();  // a callback connected or replaced a peer
    auto now = Clock::now();
    long timeout_ms = 0;
    const bool marked = std::any_of(watched_.begin(), watched_.end(), [](const Watched& w) { return w.check; });
    if (!marked && now - last_activity >= options_.spin) {
      auto until = std::min(cb_.next_deadline(), now + std::chrono::milliseconds(100));
      timeout_ms = std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1);
      if (io_.going_to_sleep()) timeout_ms = 0;
    }
    const int ready = ::poll(fds_.data(), fds_.size(), static_cast<int>(timeout_ms));
    io_.woke(ready > 0 && (fds_[0].revents & POLLIN) != 0);
    if (ready > 0) {
      for (std::size_t i = 1; i < fds_.size(); ++i)
        if (fds_[i].revents & (POLLIN | POLLERR | POLLHUP)) watched_[i - 1].check = true;
    }
    now = Clock::now();
    if (active) last_activity = now;
    guarded(cb_, "checking deadlines", [&] { cb_.on_tick(now); });
  }
  io_.run();  // last replies and releases go out before the sockets close
  for (auto& p : peers_) {
    if (p) unwatch_connection(p->dealer, p->monitor);
  }
  router_.close();
}

}  // namespace distrl::transport::detail
