#include "transport/link/pair_link.h"

#include <stdexcept>

#include "common/error.h"
#include "transport/link/link_thread.h"

namespace distrl::transport::detail {

// One event of the away link, as gathered on its thread.
struct PairLink::Relayed {
  enum class What { Request, Reply, Down, Up, Dropped, SendFailed, Replaced } what;
  int peer = -1;
  Caller from{};
  Frames frames{};
  std::string text{};
};

PairLink::PairLink(std::unique_ptr<Link> local, std::unique_ptr<Link> remote, Events events)
    : links_{std::move(local), std::move(remote)}, cb_(std::move(events)) {}

PairLink::~PairLink() { stop(); }

void PairLink::set_events(Events events) {
  cb_ = std::move(events);
  if (via_.empty()) return;  // set_peers installs the links' own
  home().set_events(direct_events(home_));
  away().set_events(cb_.concurrent ? direct_events(1 - home_) : away_events());
}

PairLink::Via PairLink::via_of(const std::string& endpoint) {
  return endpoint.rfind("shm://", 0) == 0 ? kLocal : kRemote;
}

std::vector<std::string> PairLink::bind(const std::vector<std::string>& endpoints) {
  std::vector<std::string> bound;
  for (const auto& e : endpoints) bound.push_back(links_[via_of(e)]->bind({e}).front());
  return bound;
}

void PairLink::set_peers(std::vector<std::string> endpoints) {
  const std::size_t n = endpoints.size();
  via_ = std::vector<std::atomic<std::uint8_t>>(n);
  stale_.assign(n, 0);
  down_.assign(n, "");
  std::array<std::vector<std::string>, 2> per_link{std::vector<std::string>(n), std::vector<std::string>(n)};
  home_ = kRemote;
  for (std::size_t r = 0; r < n; ++r) {
    via_[r] = via_of(endpoints[r]);
    if (via_[r] == kLocal) home_ = kLocal;
    per_link[via_[r]][r] = endpoints[r];  // the other link's entry stays empty: never dialled
  }
  for (int l = 0; l < 2; ++l) links_[l]->set_peers(std::move(per_link[l]));
  home().set_events(direct_events(home_));
  away().set_events(cb_.concurrent ? direct_events(1 - home_) : away_events());
}

void PairLink::start() {
  started_ = true;
  home().start();  // first: the away link hands its events to it from its first round on
  away().start();
}

void PairLink::stop() {
  if (!started_) return;
  {
    std::lock_guard<std::mutex> lock(handed_mu_);
    stopping_ = true;  // a hand-over waiting for room goes on (the home thread may be gone)
  }
  handed_cv_.notify_all();
  home().stop();
  away().stop();
}

bool PairLink::current(int peer, std::uint8_t via) const {
  return peer >= 0 && peer < static_cast<int>(via_.size()) && via_[peer] == via && (via == home_ || stale_[peer] == 0);
}

Link::Events PairLink::direct_events(std::uint8_t via) {
  Events e = cb_;
  e.on_request = [this, via](Caller&& from, Frames&& frames) {
    from.via = via;
    cb_.on_request(std::move(from), std::move(frames));
  };
  e.on_peer_down = [this, via](int peer, const std::string& why) {
    if (current(peer, via)) cb_.on_peer_down(peer, why);
  };
  e.on_peer_up = [this, via](int peer) {
    if (current(peer, via) && cb_.on_peer_up) cb_.on_peer_up(peer);
  };
  return e;
}

Link::Events PairLink::away_events() {
  Events e;
  const std::uint8_t away = 1 - home_;
  e.on_request = [this, away](Caller&& from, Frames&& frames) {
    from.via = away;
    const int rank = from.rank;
    gather({Relayed::What::Request, rank, std::move(from), std::move(frames)});
  };
  e.on_reply = [this](int peer, Frames&& frames) { gather({Relayed::What::Reply, peer, {}, std::move(frames)}); };
  e.on_peer_down = [this](int peer, const std::string& why) { gather({Relayed::What::Down, peer, {}, {}, why}); };
  e.on_peer_up = [this](int peer) { gather({Relayed::What::Up, peer}); };
  e.on_dropped = [this](const std::string& what) { gather({Relayed::What::Dropped, -1, {}, {}, what}); };
  // Handed over as soon as a round read anything (requests, replies, a monitor's news), not at
  // its tick: that comes after the loop's sleep, up to 100 ms later.
  e.on_served = [this] {
    served_ = true;
    hand_over();
  };
  e.on_tick = [this](Clock::time_point) { hand_over(); };
  e.next_deadline = [] { return Clock::time_point::max(); };  // the home link keeps the deadlines
  return e;
}

void PairLink::gather(Relayed&& r) { gathered_.push_back(std::move(r)); }

void PairLink::hand_over() {
  if (gathered_.empty()) return;
  auto batch = std::make_shared<std::vector<Relayed>>(std::move(gathered_));
  gathered_.clear();
  const bool served = served_;
  served_ = false;
  std::size_t bytes = 0;
  for (const auto& r : *batch) bytes += frames_bytes(r.frames);
  const std::size_t n = batch->size();
  {
    // Behind at least one batch, past the bound, this thread waits for the home thread and reads
    // nothing meanwhile: the peers' sends back up (TCP, a full ring) as on either link alone.
    std::unique_lock<std::mutex> lock(handed_mu_);
    handed_cv_.wait(lock, [&] {
      return stopping_ || handed_ == 0 || (handed_ + n <= kMaxRelayed && handed_bytes_ + bytes <= kMaxRelayedBytes);
    });
    handed_ += n;
    handed_bytes_ += bytes;
  }
  const bool posted = home().post([this, batch, served, n, bytes] {
    deliver(*batch, served);
    handed_back(n, bytes);
  });
  if (!posted) handed_back(n, bytes);  // stopping: dropped
}

void PairLink::handed_back(std::size_t n, std::size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(handed_mu_);
    handed_ -= n;
    handed_bytes_ -= bytes;
  }
  handed_cv_.notify_all();
}

void PairLink::deliver(std::vector<Relayed>& batch, bool served) {
  const std::uint8_t away = 1 - home_;
  bool requests = false;
  for (auto& r : batch) {
    switch (r.what) {
      case Relayed::What::Request:
        requests = true;
        guarded(cb_, "serving a request", [&] { cb_.on_request(std::move(r.from), std::move(r.frames)); });
        break;
      case Relayed::What::Reply:
        if (current(r.peer, away)) guarded(cb_, "reading a reply", [&] { cb_.on_reply(r.peer, std::move(r.frames)); });
        break;
      case Relayed::What::Down:
        if (!current(r.peer, away)) break;
        down_[r.peer] = r.text;
        guarded(cb_, "reporting a lost peer", [&] { cb_.on_peer_down(r.peer, r.text); });
        break;
      case Relayed::What::Up:
        if (!current(r.peer, away)) break;
        down_[r.peer].clear();
        if (cb_.on_peer_up) guarded(cb_, "reporting a peer back", [&] { cb_.on_peer_up(r.peer); });
        break;
      case Relayed::What::Dropped: report_dropped(cb_, r.text); break;
      case Relayed::What::SendFailed:
        if (cb_.on_send_failed)
          guarded(cb_, "reporting a failed send", [&] { cb_.on_send_failed(r.peer, std::move(r.frames), r.text); });
        break;
      case Relayed::What::Replaced:
        if (r.peer >= 0 && r.peer < static_cast<int>(stale_.size()) && stale_[r.peer] > 0) --stale_[r.peer];
        break;
    }
  }
  if ((served || requests) && cb_.on_served) guarded(cb_, "finishing a round of requests", [&] { cb_.on_served(); });
}

bool PairLink::send_to_peer(int peer, Frames& frames, std::string* error) {
  if (peer < 0 || peer >= static_cast<int>(via_.size())) {
    *error = "no such rank " + std::to_string(peer);
    return false;
  }
  if (via_[peer] == home_) return home().send_to_peer(peer, frames, error);
  if (!down_[peer].empty()) {
    *error = down_[peer];
    return false;
  }
  return relay(
      frames, [this, peer](Frames& f, std::string* why) { return away().send_to_peer(peer, f, why); }, peer, error);
}

bool PairLink::send_any_thread(int peer, Frames& frames, std::string* error) {
  if (home_ == kLocal && !on_io_thread() && peer >= 0 && peer < static_cast<int>(via_.size()) && via_[peer] == kLocal)
    return home().send_any_thread(peer, frames, error);
  return send_on_io_thread(*this, cb_, peer, frames, error);
}

bool PairLink::send_reply_any_thread(const Caller& to, Frames& frames) {
  if (to.via == home_) return home().send_reply_any_thread(to, frames);
  return send_reply(to, frames);  // relay() is any thread's
}

bool PairLink::send_reply(const Caller& to, Frames& frames) {
  if (to.via == home_) return home().send_reply(to, frames);
  auto route = std::make_shared<Caller>(Caller{to.route, to.rank, to.via});
  std::string error;
  return relay(
      frames,
      [this, route](Frames& f, std::string* why) {
        if (away().send_reply(*route, f)) return true;
        *why = "the caller is gone or not reading";
        return false;
      },
      to.rank, &error);
}

bool PairLink::relay(Frames& frames, std::function<bool(Frames&, std::string*)> send, int peer, std::string* error) {
  const std::size_t bytes = frames_bytes(frames);
  const std::size_t waiting = relayed_.load(std::memory_order_relaxed);
  // One message of any size may always go (the bound is on what waits behind it).
  if (waiting >= kMaxRelayed ||
      (waiting > 0 && relayed_bytes_.load(std::memory_order_relaxed) + bytes > kMaxRelayedBytes)) {
    *error = std::to_string(relayed_.load()) + " messages (" + std::to_string(relayed_bytes_.load()) +
             " bytes) wait for the other link's thread already (a peer not reading?)";
    return false;
  }
  relayed_.fetch_add(1, std::memory_order_relaxed);
  relayed_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  auto f = std::make_shared<Frames>(std::move(frames));
  const bool posted = away().post([this, peer, f, bytes, send = std::move(send)] {
    std::string why;
    const bool sent = send(*f, &why);
    relayed_.fetch_sub(1, std::memory_order_relaxed);
    relayed_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    if (sent) return;
    gather({Relayed::What::SendFailed, peer, {}, std::move(*f), std::move(why)});
    hand_over();
  });
  if (posted) return true;
  relayed_.fetch_sub(1, std::memory_order_relaxed);
  relayed_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  frames = std::move(*f);  // not taken: the caller still has it
  *error = "the link is shutting down";
  return false;
}

void PairLink::watch_peer(int peer) {
  if (peer < 0 || peer >= static_cast<int>(via_.size())) return;
  if (via_[peer] == home_) return home().watch_peer(peer);
  away().post([this, peer] { away().watch_peer(peer); });
}

void PairLink::replace_peer(int peer, const std::string& endpoint) {
  if (cb_.concurrent) throw std::logic_error("PairLink: replace_peer with concurrent events (link.h says why not)");
  if (peer < 0 || peer >= static_cast<int>(via_.size())) return;
  const std::uint8_t was = via_[peer];
  via_[peer] = via_of(endpoint);
  down_[peer].clear();
  if (via_[peer] == home_) {
    home().replace_peer(peer, endpoint);
    if (was != home_) away().post([this, peer] { away().replace_peer(peer, ""); });  // drops the earlier one
    return;
  }
  if (was == home_) home().replace_peer(peer, "");
  // The away link's events about earlier processes, gathered before this reaches its thread, are
  // dropped until every marker sent behind a replace has come back.
  ++stale_[peer];
  away().post([this, peer, endpoint] {
    away().replace_peer(peer, endpoint);
    gather({Relayed::What::Replaced, peer});
    hand_over();
  });
}

std::unique_ptr<Channel> PairLink::open_channel(int peer, const std::string& endpoint, Clock::time_point deadline,
                                                const std::function<bool()>& abandon) {
  return links_[via_of(endpoint)]->open_channel(peer, endpoint, deadline, abandon);
}

}  // namespace distrl::transport::detail
