// A duplex connection between two processes of one host: two rings (one per direction) in
// segments the connecting side creates and passes, with their descriptors, over a Unix socket
// that stays open for the connection's life (its EOF is the peer's death). The accepting side
// checks what it maps (sealed memfds of the announced size, ring layout) before using it.
// Private to transport/shm/.
#pragma once

#include <chrono>
#include <string>

#include "transport/shm/detail/ring.h"
#include "transport/shm/detail/segment.h"
#include "transport/shm/detail/unix_socket.h"

namespace distrl::transport::detail {

struct RingPair {
  UnixSocket socket;
  Segment out_segment, in_segment;
  RingWriter out;
  RingReader in;
};

// Connects to the listener at path and hands it two rings of `capacity` bytes each (a power of
// two). `peer` names the other side in errors.
RingPair connect_ring_pair(const std::string& path, std::size_t capacity, const std::string& peer,
                           std::chrono::steady_clock::time_point deadline);
// Accepts one connection on listener and maps the rings it brings (TimeoutError when none
// comes; TransportError/ProtocolError, the connection dropped, when what it brings is wrong).
RingPair accept_ring_pair(UnixSocket& listener, const std::string& peer,
                          std::chrono::steady_clock::time_point deadline);

}  // namespace distrl::transport::detail
