// The ZeroMQ link (link.h): one thread touches its sockets: a ROUTER bound to this
// process's endpoints (requests in, replies out), one DEALER per peer, connected on first use
// (requests out, replies in), and a monitor per DEALER that reports lost connections. Other
// threads hand it work with post(); an eventfd wakes it. It polls without sleeping for `spin`
// after activity, which on a 2-vCPU VM saves a cross-CPU wake-up per message. Channels are
// DEALERs of their own. Private to transport/.
//
// It sleeps in poll(2) on the sockets' ZMQ_FDs (edge-style: readable when the socket's command
// mailbox was signalled) and reads only the sockets that fired or that it sent on since their
// last drain (a send may consume the signal of input that already arrived). zmq_poll instead
// asks every socket for ZMQ_EVENTS before and after each sleep, two system calls per socket:
// with 8 peers (17 sockets) that was most of the agent's I/O thread time per request.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

#include <zmq.hpp>

#include "transport/link/link.h"
#include "transport/link/link_thread.h"

namespace distrl::transport::detail {

class IoLoop final : public Link {
 public:
  using Callbacks = Link::Events;
  struct Options {
    std::size_t max_frame_bytes = 1ull << 30;
    std::size_t max_parts = 4096 + 2;  // frames per message, routing id included
    std::chrono::microseconds spin{0};
    std::function<void()> thread_init;  // runs first on the I/O thread (RpcOptions::thread_init)
    // The DEALERs' routing ids start with this (member_identity); a counter ends each. Empty:
    // libzmq's own ids (the connections of no member).
    std::string identity_prefix;
    // The world's member key (RPC keeps it in the store: rpc/member_key). A connection counts as
    // member r's (Caller::rank) only when its routing id starts with member r's tag under this
    // key; empty: every connection is an outsider's.
    std::string member_key;
    // How long a closed channel keeps sending what it queued (ZeroMQ's linger). RPC's channels
    // wait for their replies, so 0; the process group's sends are one-way and must not be lost
    // when the group is destroyed right after its last send.
    std::chrono::milliseconds channel_linger{0};
  };

  IoLoop(std::shared_ptr<zmq::context_t> ctx, Options options, Callbacks callbacks);
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // "rpc-r<rank>-<tag>-<nonce>-": the routing-id prefix of member `rank`'s connections, tag
  // being the rank's under the world's member key (16 hex digits, keyed: a stranger who names
  // itself rpc-r1-... without the key is no member) and nonce this process's. A server reads
  // the rank back from the connection (Caller::rank), never from the message.
  static std::string member_identity(int rank, const std::string& key, std::uint64_t nonce);
  // Before start(): the member identity and key, when they are known only once the world's
  // addresses are (RPC reads the key from the store at rendezvous).
  void set_member_identity(std::string identity_prefix, std::string member_key);

  // Before start(): binds the ROUTER to each endpoint; returns the bound endpoints.
  void set_events(Events events) override { cb_ = std::move(events); }
  std::vector<std::string> bind(const std::vector<std::string>& endpoints) override;
  // Before start(): the endpoint to dial for each peer rank.
  void set_peers(std::vector<std::string> endpoints) override;
  void start() override;
  // Runs every posted task, closes the sockets and joins. Idempotent.
  void stop() override;

  // Any thread: run fn on the I/O thread. False (fn dropped) once stop() has begun.
  bool post(std::function<void()> fn) override;
  bool on_io_thread() const override { return io_.on_thread(); }
  // Message bytes this loop sent and read (frames, routing ids not counted). Any thread.
  std::uint64_t bytes_sent() const override { return bytes_sent_.load(std::memory_order_relaxed); }
  std::uint64_t bytes_received() const override { return bytes_received_.load(std::memory_order_relaxed); }

  // I/O thread only. False (and *error) when the message cannot be queued.
  bool send_to_peer(int peer, Frames& frames, std::string* error) override;
  // ZeroMQ's sockets are the I/O thread's alone: always the hand-off.
  bool send_any_thread(int peer, Frames& frames, std::string* error) override {
    return send_on_io_thread(*this, cb_, peer, frames, error);
  }
  bool send_reply_any_thread(const Caller& to, Frames& frames) override {
    return reply_on_io_thread(*this, cb_, to, frames);
  }
  bool send_reply(const Caller& to, Frames& frames) override;
  // I/O thread only: connects this loop's DEALER to `peer` (if not yet), so that its death is
  // watched and reported (on_peer_down) even when every call to it takes another path.
  void watch_peer(int peer) override;
  // I/O thread only: `peer` restarted and now listens at `endpoint` (a rank that rejoined).
  // Closes the connection to the earlier process (dropping what was queued for it) and, if it
  // was connected, connects to the new one at once so that it is watched again.
  void replace_peer(int peer, const std::string& endpoint) override;
  // Any thread: a DEALER of its own, connected under this process's identity prefix.
  std::unique_ptr<Channel> open_channel(int peer, const std::string& endpoint, Clock::time_point deadline,
                                        const std::function<bool()>& abandon) override;

 private:
  struct Peer;
  void run();
  void rebuild_poll_items();
  void mark(void* socket);               // read this socket before the next sleep
  bool serve_marked();                   // drains the marked sockets; true when any was
  static constexpr int kDrainCap = 256;  // messages per socket per round, so no socket starves the rest
  bool drain_router();                   // true: stopped at kDrainCap with more maybe waiting
  bool drain_peer(int peer);
  void read_monitor(int peer);
  Peer& connect_peer(int peer);

  std::shared_ptr<zmq::context_t> ctx_;
  // The rank a connection's routing id names, if it carries that rank's tag under the member
  // key; -1 otherwise (an outsider's, or a stranger's claim).
  // I/O thread only (tags_ caches each rank's tag).
  int rank_of_identity(const Frame& id);

  Options options_;
  std::vector<std::string> tags_;  // member_tag(member_key, r) by rank (world-sized), filled as ranks are seen
  Callbacks cb_;
  zmq::socket_t router_;
  std::vector<std::string> peer_endpoints_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::uint64_t connections_made_ = 0;           // names each connection's monitor uniquely
  std::atomic<std::uint64_t> channels_made_{0};  // names each channel's routing id uniquely
  enum class Source { Router, Reply, Monitor };
  struct Watched {
    void* socket;
    Source source;
    int peer;    // for Reply and Monitor
    bool check;  // may have input: drain before sleeping
  };
  std::vector<Watched> watched_;
  std::vector<pollfd> fds_;  // io_.wake_fd(), then each watched socket's ZMQ_FD
  bool items_dirty_ = true;
  LinkThread io_;
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0};
};

}  // namespace distrl::transport::detail
