// Two links run as one (link.h's seam), the link chosen per peer: shared memory to the
// peers on this host, ZeroMQ to the others (a world that spans hosts), as TensorPipe chooses a
// transport per pipe. Private to transport/.
//
// Threads. One of the two links is the home link: its I/O thread is the PairLink's, which runs
// every callback and every posted task, so RPC above still sees one I/O thread. The other link's
// events (requests, replies, peers down and up, refusals) are gathered on its own I/O thread
// and handed to the home thread after each round of it that read any (in the order read,
// followed by on_served), and at its tick. The home link is the shared-memory one when any
// endpoint set_peers gets is shm:// (RPC gives this process's own entry as shm:// only when some
// other rank is on this host), so the same-host traffic takes no extra hop; else ZeroMQ's.
// A message for a peer of the other link is handed to that link's thread (post): one hop each
// way, a few µs beside a network's tens; a send that fails there comes back as on_send_failed.
// Channels (the sync path) need no hop: open_channel picks the link by the endpoint's scheme.
// Events::concurrent (callbacks that lock for themselves) skips the hand-over: each link runs
// the callbacks on its own thread.
//
// Rejoins. replace_peer may move a peer to the other link (it restarted on another host): the
// first link drops it (replace_peer with no endpoint) and its events about it are dropped from
// then on. Events the away link gathered about a peer before a replace_peer reached its thread
// are dropped too (a marker goes through its thread behind the replace; they count), so an
// earlier process's death never fails the new one's calls.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/link/link.h"

namespace distrl::transport::detail {

class PairLink final : public Link {
 public:
  enum Via : std::uint8_t { kLocal = 0, kRemote = 1 };  // also Caller::via

  // local: the shared-memory link, remote: ZeroMQ's, neither started (bound or not). Their
  // callbacks are replaced by the PairLink's (set_peers installs them, once the home is known).
  PairLink(std::unique_ptr<Link> local, std::unique_ptr<Link> remote, Events events);
  ~PairLink() override;
  PairLink(const PairLink&) = delete;
  PairLink& operator=(const PairLink&) = delete;

  // Which link an endpoint belongs to: shm:// the local one, anything else the remote one.
  static Via via_of(const std::string& endpoint);

  void set_events(Events events) override;
  // Binds each endpoint on its link (via_of); returns what they bound, in the same order.
  std::vector<std::string> bind(const std::vector<std::string>& endpoints) override;
  // Chooses each peer's link by its endpoint's scheme and the home link (see above).
  void set_peers(std::vector<std::string> endpoints) override;
  void start() override;
  // Stops the home link (its last tasks may still hand messages to the other), then the other.
  void stop() override;

  bool post(std::function<void()> fn) override { return home().post(std::move(fn)); }
  bool on_io_thread() const override { return links_[home_]->on_io_thread(); }
  std::uint64_t bytes_sent() const override { return links_[0]->bytes_sent() + links_[1]->bytes_sent(); }
  std::uint64_t bytes_received() const override { return links_[0]->bytes_received() + links_[1]->bytes_received(); }

  bool send_to_peer(int peer, Frames& frames, std::string* error) override;
  // A peer of the shared-memory home link: that link's send_any_thread (the caller writes it
  // itself); any other: the hand-off to the home thread's send_to_peer.
  bool send_any_thread(int peer, Frames& frames, std::string* error) override;
  // The home link's for its callers; the other link's are relayed from the calling thread.
  bool send_reply_any_thread(const Caller& to, Frames& frames) override;
  bool send_reply(const Caller& to, Frames& frames) override;
  void watch_peer(int peer) override;
  void replace_peer(int peer, const std::string& endpoint) override;
  std::unique_ptr<Channel> open_channel(int peer, const std::string& endpoint, Clock::time_point deadline,
                                        const std::function<bool()>& abandon) override;

 private:
  struct Relayed;
  Link& home() { return *links_[home_]; }
  Link& away() { return *links_[1 - home_]; }
  // The user's callbacks for the link `via`, as run on its own thread (events about a peer that
  // is no longer that link's are dropped).
  Events direct_events(std::uint8_t via);
  Events away_events();                                    // gathered, handed to the home thread
  void deliver(std::vector<Relayed>& batch, bool served);  // on the home thread
  // On the away link's thread (inside a posted task): queued for the next hand-over.
  void gather(Relayed&& r);
  // Hands what was gathered to the home thread; waits first while what it handed before and
  // the home thread has not run is over kMaxRelayed messages or kMaxRelayedBytes.
  void hand_over();
  void handed_back(std::size_t n, std::size_t bytes);  // the home thread ran (or dropped) a batch
  bool current(int peer, std::uint8_t via) const;
  // Hands a message for the away link to its thread (a request or a reply); false, taking
  // nothing, when kMaxRelayed messages wait there already, or some do and this one would take
  // them past kMaxRelayedBytes (a peer that never reads its replies must cost a bounded queue,
  // as on either link alone; one message of any size may always go), or the link stops.
  bool relay(Frames& frames, std::function<bool(Frames&, std::string*)> send, int peer, std::string* error);

  // What may wait for the other link's thread, each way: the shared-memory link's bound on what
  // waits behind a full ring.
  static constexpr std::size_t kMaxRelayed = 65536;
  static constexpr std::size_t kMaxRelayedBytes = 128u << 20;

  std::array<std::unique_ptr<Link>, 2> links_;  // by Via
  Events cb_;
  std::uint8_t home_ = kLocal;
  bool started_ = false;
  // Home thread only (and before start):
  // Per peer; written on the home thread (and before start), read by send_any_thread on any.
  std::vector<std::atomic<std::uint8_t>> via_;
  std::vector<int> stale_;         // per peer: replace_peer markers still on their way
  std::vector<std::string> down_;  // per peer of the away link: why it is down, or ""
  // Any thread: messages (and their bytes) handed to the away link's thread, not yet sent.
  std::atomic<std::size_t> relayed_{0}, relayed_bytes_{0};
  // Handed from the away thread to the home thread, not run yet (handed_mu_).
  std::mutex handed_mu_;
  std::condition_variable handed_cv_;
  std::size_t handed_ = 0, handed_bytes_ = 0;
  bool stopping_ = false;
  // Away thread only:
  std::vector<Relayed> gathered_;
  bool served_ = false;
};

}  // namespace distrl::transport::detail
