// The shared-memory link (detail/link.h's seam) for worlds whose processes share one host.
// Each connection is a ring pair (detail/ring_pair.h) over a Unix socket: the I/O thread keeps
// one to every peer it calls (requests out, replies in) and accepts the connections of the
// peers' I/O threads and calling threads (requests in, replies out). A channel is a ring pair of
// the calling thread's own: it writes its request into shared memory and sleeps on a futex
// until the reply is there, with no thread of ours in between.
//
// The I/O thread waits in poll(2) on its eventfd, the listening socket and every connection's
// socket: a peer that writes into one of its rings while it sleeps writes the eventfd (the
// ring's Doorbell says whether it sleeps), so one wait covers rings, posted work, new
// connections and deaths (a socket's EOF: the peer process is gone, SIGKILL included). After
// activity it spins for up to Options::spin before it sleeps. Ring contents are untrusted: a
// connection whose ring is corrupt is dropped (on_dropped names it), never read past.
//
// Requests without the hop (send_any_thread). The I/O thread's connection to a peer has one
// writer at a time, its Slot's mutex deciding which: the I/O thread (queueing and pumping) or
// a calling thread that writes its whole message into the ring itself and publishes it (which
// rings the peer's doorbell). Replies take the same way (send_reply_any_thread: a handler-pool
// thread answering), through the accepted connection's own slot, found by its route. A caller writes only when it takes the mutex without waiting, the
// connection is established (answered, not stalled), nothing is queued behind its writer,
// nothing handed to the I/O thread for that peer is still on its way (Slot::posted), and the
// message fits now; else it hands the message to the I/O thread as before, and while such a
// message waits, the I/O thread's own sends to that peer queue behind it. So a message never
// overtakes one sent to the same peer before it. The I/O thread pumps a connection, and looks
// at it before it sleeps, only when it gets the mutex at once (try_lock; the next round, or no
// sleep, otherwise); queueing a message and closing a connection wait for a caller's write in
// progress (a copy into the ring, at most the ring's size). The I/O thread closes a slot (under
// its mutex) before its connection is retired, replaced, reported down or unmapped.
// Private to transport/.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <poll.h>

#include "transport/link/link.h"
#include "transport/link/link_thread.h"
#include "transport/link/shm/ring_pair.h"

namespace distrl::transport::detail {

class ShmLink final : public Link {
 public:
  struct Options {
    std::size_t max_message_bytes = 1ull << 30;
    std::size_t max_parts = 4096 + 1;   // frames per message
    std::size_t ring_bytes = 1u << 20;  // per direction per connection; a power of two
    // How long the I/O thread polls after activity, and the most a channel waits spinning
    // before it sleeps (adaptive: detail/futex.h's Spinner).
    std::chrono::microseconds spin{20};
    // How long a channel's send waits for room in a full ring before it fails.
    std::chrono::milliseconds send_timeout{60000};
    // A peer that has not beaten for this long is reported down (its process stopped, or too
    // starved to run a thread once a second), and up again when it beats. The beat comes from
    // a thread of the link's own that runs no user code (as ZeroMQ's heartbeats come from its
    // I/O threads): a handler or continuation that holds the I/O thread for minutes does not
    // make peers think the process dead. The timeout is ZeroMQ's heartbeat timeout, 10 s.
    std::chrono::milliseconds heartbeat_timeout{10000};
    std::function<void()> thread_init;  // runs first on the I/O thread
    int rank = -1;                      // this process's rank, told to the peers it connects to
  };

  ShmLink(Options options, Events events);
  ~ShmLink() override;
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  // "shm://<path of a Unix socket>" for a path; listens at the first endpoint, returns it.
  // TransportError when shared memory cannot be used here (no memfd, or a ring's size is over
  // the process's file-size limit, RLIMIT_FSIZE: memfds count as files).
  void set_events(Events events) override { cb_ = std::move(events); }
  std::vector<std::string> bind(const std::vector<std::string>& endpoints) override;
  void set_peers(std::vector<std::string> endpoints) override;
  void start() override;
  // Runs every posted task, closes the rings (peers read an orderly close) and the sockets,
  // removes the socket file and joins. Idempotent.
  void stop() override;

  bool post(std::function<void()> fn) override;
  bool on_io_thread() const override { return io_.on_thread(); }
  std::uint64_t bytes_sent() const override { return bytes_sent_.load(std::memory_order_relaxed); }
  std::uint64_t bytes_received() const override { return bytes_received_.load(std::memory_order_relaxed); }
  // Messages calling threads wrote into a ring themselves (send_any_thread, send_reply_any_thread).
  std::uint64_t written_by_callers() const { return written_by_callers_.load(std::memory_order_relaxed); }

  bool send_to_peer(int peer, Frames& frames, std::string* error) override;
  bool send_any_thread(int peer, Frames& frames, std::string* error) override;
  bool send_reply_any_thread(const Caller& to, Frames& frames) override;
  bool send_reply(const Caller& to, Frames& frames) override;
  void watch_peer(int peer) override;
  void replace_peer(int peer, const std::string& endpoint) override;
  // Waits for the peer's listener to take the connection and its I/O thread to answer until
  // `deadline` (a busy peer: the call's own deadline); a listener that is not there at all is
  // waited for 2 s at most (the process is gone). TimeoutError at the deadline.
  std::unique_ptr<Channel> open_channel(int peer, const std::string& endpoint, Clock::time_point deadline,
                                        const std::function<bool()>& abandon) override;

  // The socket path in an endpoint ("shm:///tmp/x" -> "/tmp/x"); ConfigError for another scheme.
  static std::string path_of(const std::string& endpoint);

 private:
  struct Conn;
  // A peer's connection as the calling threads see it (see the top of this file).
  struct Slot {
    std::mutex mu;                       // the write side of the peer's Conn (its writer, queue, ring tail), and conn
    Conn* conn = nullptr;                // set while callers may write into it themselves (mu)
    std::atomic<std::size_t> posted{0};  // messages handed to the I/O thread, not yet queued
  };
  // Writes the whole message into slot's connection now, when a calling thread may (see the
  // top): true when written; false, frames untouched, when it must be handed off.
  bool write_now(Slot& slot, Frames& frames);
  // The write side of c, locked: its slot's mutex (try: only when it is free at once; not owned
  // then).
  std::unique_lock<std::mutex> lock_out(Conn& c, bool try_only = false);
  // Opens peers_[p] to calling threads (established and not stalled); closes a slot (a peer's
  // or an accepted connection's).
  void open_slot(int p);
  static void close_slot(Slot& slot);
  // peers_[p] (closed to callers) goes to retired_, freed after the round.
  void retire_peer(int p);
  void run();
  bool serve_all();  // reads and writes every connection; true when anything moved
  bool serve(Conn& c);
  // Reads and hands on one message; false when none is whole yet.
  bool read_one(Conn& c);
  // A connection whose peer closed it: every message published before now is read, however
  // many (a caller's last notices, a peer's last replies); nothing written later is waited for.
  void drain(Conn& c);
  bool pump(Conn& c);
  bool queue(Conn& c, Frames& frames);
  void wait_for_events(int timeout_ms);
  void on_socket_events(std::size_t fd_index, short revents);
  void accept_all();
  void admit(std::size_t index);
  void close_accepted(std::uint64_t id, const std::string& why);
  void peer_lost(int peer, const std::string& why);
  void heartbeats(std::chrono::steady_clock::time_point now);
  // The connection to `peer`, made now if there is none. Null with *error when it cannot be:
  // the peer is down (its listener is gone: lost, named), or (*later set) its listener cannot
  // take a connection yet (a full backlog: the process is stopped or busy; this process out of
  // descriptors) and a retry is due at unsent_[peer].retry_at.
  Conn* connect_peer(int peer, std::string* error, bool* later = nullptr);
  void retry_connects(std::chrono::steady_clock::time_point now);

  // Raises the beat word of every accepted I/O-thread connection once a second, on a thread of
  // its own. add/remove on the I/O thread (remove before the connection's rings are unmapped);
  // start and stop from the link's.
  class Beater {
   public:
    void start();
    void stop();  // idempotent; joins
    void add(std::uint64_t id, std::atomic<std::uint64_t>* word);
    void remove(std::uint64_t id);

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    std::unordered_map<std::uint64_t, std::atomic<std::uint64_t>*> words_;
    std::thread thread_;
  };

  Options options_;
  Events cb_;
  Beater beater_;
  std::string path_;
  UnixSocket listener_;
  // Out of descriptors, this one is closed to accept (and close) a waiting connection with, so
  // the backlog empties instead of waking poll(2) again at once; the system out of them too:
  // the listener is left alone until accept_paused_until_.
  OwnedFd reserve_;
  std::chrono::steady_clock::time_point accept_paused_until_{};
  std::uint64_t refused_no_descriptor_ = 0;
  LinkThread io_;  // its eventfd also wakes us for the rings: peers get it in the handshake
  std::vector<std::string> peer_endpoints_;
  std::vector<std::unique_ptr<Conn>> peers_;  // I/O thread only (their write side: slots_)
  std::unique_ptr<Slot[]> slots_;             // per peer
  // Accepted I/O-thread connections by route, for replies from other threads (routes_mu_).
  std::mutex routes_mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Slot>> routes_;
  std::vector<std::string> peer_down_;  // why, or "" (I/O thread only)
  // Frames for a peer that could not take a connection yet, in order: sent once a retry (backoff
  // 5 ms doubling to 500 ms) connects; their calls otherwise end at their own deadlines. Only a
  // death (the listener gone, EOF on an established connection, the heartbeat) loses the peer.
  struct Unsent {
    std::deque<Frames> frames;
    std::size_t bytes = 0;  // of frames (bounded as a connection's queue)
    bool watch = false;     // watch_peer asked for the connection (nothing to send): retried too
    std::chrono::steady_clock::time_point retry_at{};
    std::chrono::milliseconds backoff{0};
    void back_off(std::chrono::steady_clock::time_point now) {  // 5 ms, doubling to 500 ms
      backoff = std::clamp(backoff * 2, std::chrono::milliseconds(5), std::chrono::milliseconds(500));
      retry_at = now + backoff;
    }
  };
  std::vector<Unsent> unsent_;  // I/O thread only
  bool any_unsent_ = false;     // some peer has frames in unsent_ (the loop's check is one load)
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> accepted_;  // I/O thread only
  struct Handshake {
    UnixSocket socket;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Handshake> handshaking_;          // accepted, hello not read yet
  std::vector<std::unique_ptr<Conn>> retired_;  // freed after the round
  std::uint64_t next_id_ = 0;
  // poll(2) set: the tasks' eventfd, listener_, handshaking_, accepted_ (in poll_ids_ order), peers_.
  std::vector<struct pollfd> fds_;
  std::vector<std::uint64_t> poll_ids_;
  std::vector<std::pair<int, Conn*>> poll_peers_;  // the peers' entries: rank, connection
  std::atomic<std::uint64_t> bytes_sent_{0}, bytes_received_{0}, written_by_callers_{0};
};

}  // namespace distrl::transport::detail
