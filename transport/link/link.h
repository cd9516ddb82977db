// The transport seam: how RPC reaches its peers. A Link is one process's connections to the
// ranks of its world, run by one I/O thread: it listens for requests, sends requests and
// replies as frames, reads replies, and reports a peer's connection lost and back. A Channel
// is a connection of one calling thread's own (the sync fast path). Frames are opaque here:
// call ids, deadlines, dead-peer errors, rejoin, decoder limits and hooks live above, in RPC.
// Frames are the seam's own buffers (wire/detail/frames.h): ZeroMQ's message type stays inside
// the ZeroMQ link.
// Two links implement it: ZeroMQ (io_loop.h) and shared memory (shm/shm_link.h); a
// PairLink (pair_link.h) runs both as one, chosen per peer. All three pass the same
// contract suite (tests/integration/link_contract_test.cpp), which a new link joins by adding
// its name there. Private to transport/.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/wire/detail/frames.h"

namespace distrl::transport::detail {

// Who sent a request: the route its reply takes (the link's own token, opaque above) and the
// member rank the connection was opened under (-1: not a member's connection). The rank comes
// from the connection, not from the message, so that RPC can refuse a message whose header
// claims another rank.
struct Caller {
  Frame route;
  int rank = -1;
  std::uint8_t via = 0;  // which of a PairLink's links the request came through (0 elsewhere)
};

// A connection of the calling thread's own to one peer's process. Used by one thread at a time
// (checked out of RPC's channel pool); closed when destroyed, which may be after its Link has
// stopped (an implementation keeps what the channel needs alive itself: ZeroMQ's holds the
// context). Errors throw TransportError.
class Channel {
 public:
  virtual ~Channel() = default;
  // Queues a message without blocking; false when the send queue is full.
  virtual bool send(Frames& frames) = 0;
  // Waits up to `wait` (0: just looks) for input; true when a message may be read.
  virtual bool readable(std::chrono::milliseconds wait) = 0;
  // Reads one waiting message (non-blocking), keeping at most max_parts frames.
  virtual Received receive(Frames& out, std::size_t max_parts) = 0;
};

class Link {
 public:
  using Clock = std::chrono::steady_clock;
  // Run on the link's I/O thread. A callback that throws is reported through on_dropped.
  struct Events {
    std::function<void(Caller&& from, Frames&& frames)> on_request;
    std::function<void(int peer, Frames&& frames)> on_reply;
    std::function<void(int peer, const std::string& why)> on_peer_down;
    // Optional: a connection reported down came back at the same endpoint (the process was
    // stopped or its host unreachable for a while, not gone).
    std::function<void(int peer)> on_peer_up;
    std::function<void(Clock::time_point now)> on_tick;  // after each round
    // After a round that read messages: every request that had arrived by then has been served
    // (optional; the RL batcher closes a batch here).
    std::function<void()> on_served;
    std::function<Clock::time_point()> next_deadline;  // the loop wakes for it
    // A message refused before any callback saw it (too many frames), or a callback that threw.
    std::function<void(const std::string& what)> on_dropped;
    // Optional: a message send_to_peer or send_reply accepted could not be sent after all (a
    // PairLink hands a message for the other link to that link's thread), with its frames as
    // given and why; peer is the rank it was for (a reply's Caller::rank).
    std::function<void(int peer, Frames&& frames, const std::string& why)> on_send_failed;
    // The callbacks are safe to run on two threads at once (they lock for themselves): a
    // PairLink then runs each link's events on that link's own I/O thread instead of handing the
    // other link's to its home thread (one thread wake-up less per message). Such a user never
    // calls replace_peer (the process group: its members do not rejoin).
    bool concurrent = false;
  };

  virtual ~Link() = default;

  // Before start(): the callbacks from here on, in place of those the link was made with (a
  // PairLink puts its own between a link and RPC).
  virtual void set_events(Events events) = 0;
  // Before start(): listens at each endpoint; returns where peers reach it.
  virtual std::vector<std::string> bind(const std::vector<std::string>& endpoints) = 0;
  // Before start(): where each peer rank listens.
  virtual void set_peers(std::vector<std::string> endpoints) = 0;
  virtual void start() = 0;
  // Runs every posted task, closes the connections and joins. Idempotent.
  virtual void stop() = 0;

  // Any thread: run fn on the I/O thread. False (fn dropped) once stop() has begun.
  virtual bool post(std::function<void()> fn) = 0;
  virtual bool on_io_thread() const = 0;
  // Message bytes the I/O thread sent and read (channels count their own). Any thread.
  virtual std::uint64_t bytes_sent() const = 0;
  virtual std::uint64_t bytes_received() const = 0;

  // I/O thread only. False (and *error) when the message cannot be queued.
  virtual bool send_to_peer(int peer, Frames& frames, std::string* error) = 0;
  // Any thread: send_to_peer without the hop where the link can. The calling thread writes the
  // message into the peer's connection itself when nothing sent to that peer before is still
  // waiting (order per peer is kept: a message never overtakes one sent before it) and it fits
  // now (shared memory); otherwise it goes to the I/O thread's send_to_peer, and a send that
  // fails there comes back through Events::on_send_failed. On the I/O thread: send_to_peer.
  // False (and *error, the frames kept) when it cannot be taken at all: the link is stopping,
  // or (on the I/O thread) send_to_peer refused it.
  virtual bool send_any_thread(int peer, Frames& frames, std::string* error) = 0;
  // I/O thread only. False when the caller is gone or its queue is full.
  virtual bool send_reply(const Caller& to, Frames& frames) = 0;
  // Any thread: send_reply without the hop where the link can (as send_any_thread); a reply
  // refused after the hand-off comes back through Events::on_send_failed (peer: to.rank).
  // False (frames kept) when it cannot be taken: the caller is gone, or the link is stopping.
  virtual bool send_reply_any_thread(const Caller& to, Frames& frames) = 0;
  // I/O thread only: connect to `peer` (if not yet), so that its death is reported
  // (on_peer_down) even when every call to it takes a channel.
  virtual void watch_peer(int peer) = 0;
  // I/O thread only: `peer` restarted and now listens at `endpoint` (a rank that rejoined).
  // Drops the connection to the earlier process (and what was queued for it); a watched peer
  // is connected again at once. An empty endpoint only drops it (a PairLink moved the peer to
  // its other link).
  virtual void replace_peer(int peer, const std::string& endpoint) = 0;

  // Any thread: a new channel to the process listening at `endpoint` (peer's, as the caller
  // read it together with its incarnation), opened by `deadline` (the call's) or TimeoutError;
  // `abandon`, asked between waits, gives the wait up when true (TransportError: the caller
  // knows why, the peer reported down or shutdown).
  // A channel has no heartbeat of its own: its replies bypass the I/O thread, so the caller
  // also posts watch_peer(peer) (post(), any thread), and a call waiting on a channel ends at
  // the first of: the reply, the peer reported down by the I/O thread's watch (EOF of its
  // connection, a missed heartbeat), the peer's socket closing, the call's deadline.
  virtual std::unique_ptr<Channel> open_channel(int peer, const std::string& endpoint, Clock::time_point deadline,
                                                const std::function<bool()>& abandon) = 0;
};

}  // namespace distrl::transport::detail
