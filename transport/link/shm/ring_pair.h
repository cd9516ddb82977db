// A duplex connection between two processes of one host: two rings (one per direction) in
// segments the connecting side creates and passes, with their descriptors, over a Unix socket
// that stays open for the connection's life (its EOF is the peer's death). The accepting side
// checks what it maps (sealed memfds of the announced size, ring layout) before using it.
//
// The handshake: the connector sends a hello ("distrl-shm/1 <capacity> <kind> <rank>" with the
// two ring descriptors and, when it waits in poll(2), its eventfd); the acceptor maps the rings
// and answers "ok" (with its own eventfd when it has one). The connector may write into its
// ring before the answer comes (the acceptor reads what is there once it has mapped it), so a
// connecting I/O thread never blocks on the other side's. Private to transport/ (the shared-memory link).
#pragma once

#include <chrono>
#include <string>

#include "transport/link/shm/ring.h"
#include "transport/link/shm/segment.h"
#include "transport/link/shm/unix_socket.h"

namespace distrl::transport::detail {

struct RingPair {
  UnixSocket socket;
  Segment out_segment, in_segment;
  RingWriter out;
  RingReader in;
  OwnedFd peer_wake;  // the other side's eventfd, when it sent one (the rings ring it)
};

// What a connector says about itself: kind "io" (an I/O thread's connection: requests out,
// replies in) or "channel" (one calling thread's) or "plain"; the rank it is (-1: none).
struct Hello {
  std::size_t capacity = 0;
  std::string kind = "plain";
  int rank = -1;
};

using Deadline = std::chrono::steady_clock::time_point;

// Connector, step 1: creates the rings, connects to path and sends the hello (with wake_fd
// unless -1). Does not wait for the answer. Waits for a listener that is not there until
// `deadline`, for one with a full backlog until `busy_deadline` (by default the same).
// `abandon` (UnixSocket's) may give the wait up.
RingPair open_ring_pair(const std::string& path, const Hello& hello, int wake_fd, const std::string& peer,
                        Deadline deadline, Deadline busy_deadline = Deadline::min(), const Abandon& abandon = {});
// Connector, step 2: reads the answer (blocking until the deadline: TimeoutError; Abandoned when
// `abandon` says so first); takes the acceptor's eventfd into pair.peer_wake and points the
// rings at it.
void finish_ring_pair(RingPair& pair, Deadline deadline, const Abandon& abandon = {});

// Acceptor: reads the hello on a connection just accepted (blocking until the deadline) and
// maps its rings. ProtocolError/TransportError (and every descriptor that came closed) when
// what it brings is wrong.
RingPair admit_ring_pair(UnixSocket&& connection, Hello* hello, const std::string& peer, Deadline deadline);
// Acceptor: answers the hello (with wake_fd unless -1).
void answer_ring_pair(RingPair& pair, int wake_fd);

// The blocking compositions (benchmarks, tests): no eventfds, futex wake-ups both ways.
RingPair connect_ring_pair(const std::string& path, std::size_t capacity, const std::string& peer, Deadline deadline);
RingPair accept_ring_pair(UnixSocket& listener, const std::string& peer, Deadline deadline);

}  // namespace distrl::transport::detail
