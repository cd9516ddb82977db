#include "transport/shm/detail/ring_pair.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/error.h"

namespace distrl::transport::detail {
namespace {

const std::string kHello = "distrl-shm/1 ";  // + the capacity in decimal
constexpr std::size_t kMaxCapacity = std::size_t{1} << 30;

}  // namespace

RingPair connect_ring_pair(const std::string& path, std::size_t capacity, const std::string& peer,
                           std::chrono::steady_clock::time_point deadline) {
  RingPair p;
  const std::size_t bytes = ring_segment_bytes(capacity);
  p.out_segment = Segment::create("distrl-ring-out", bytes);
  p.in_segment = Segment::create("distrl-ring-in", bytes);
  init_ring(p.out_segment.data(), capacity);
  init_ring(p.in_segment.data(), capacity);
  p.out = RingWriter(p.out_segment.data(), bytes, peer);
  p.in = RingReader(p.in_segment.data(), bytes, peer);
  p.socket = UnixSocket::connect(path, deadline);
  p.socket.send(kHello + std::to_string(capacity), {p.out_segment.fd(), p.in_segment.fd()});
  return p;
}

RingPair accept_ring_pair(UnixSocket& listener, const std::string& peer,
                          std::chrono::steady_clock::time_point deadline) {
  RingPair p;
  p.socket = listener.accept(deadline);
  if (!p.socket) throw TimeoutError("shared memory: no connection from " + peer + " before the deadline");
  std::vector<int> fds;
  const std::string hello = p.socket.receive(64, &fds, deadline);
  const auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  char* end = nullptr;
  const unsigned long long capacity =
      hello.compare(0, kHello.size(), kHello) == 0 ? std::strtoull(hello.c_str() + kHello.size(), &end, 10) : 0;
  if (fds.size() != 2 || capacity < 4096 || capacity > kMaxCapacity || (capacity & (capacity - 1)) != 0 ||
      end != hello.c_str() + hello.size()) {
    close_all();
    throw ProtocolError("shared memory: " + peer + " opened with a malformed handshake (" +
                        std::to_string(fds.size()) + " descriptors)");
  }
  const std::size_t bytes = ring_segment_bytes(static_cast<std::size_t>(capacity));
  // The peer's "out" is our input. attach() takes each descriptor, also when it refuses.
  const int theirs_out = fds[0], theirs_in = fds[1];
  try {
    p.in_segment = Segment::attach(theirs_out, bytes, peer + "'s ring to us");
  } catch (...) {
    ::close(theirs_in);
    throw;
  }
  p.out_segment = Segment::attach(theirs_in, bytes, peer + "'s ring from us");
  p.in = RingReader(p.in_segment.data(), bytes, peer);
  p.out = RingWriter(p.out_segment.data(), bytes, peer);
  return p;
}

}  // namespace distrl::transport::detail
