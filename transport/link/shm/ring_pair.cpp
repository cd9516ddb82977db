#include "transport/link/shm/ring_pair.h"

#include <sstream>
#include <vector>

#include "common/error.h"

namespace distrl::transport::detail {
namespace {

const std::string kHello = "distrl-shm/1";
const std::string kAnswer = "ok";
constexpr std::size_t kMaxCapacity = std::size_t{1} << 30;

// Descriptors received: closed unless taken.
struct ReceivedFds {
  std::vector<OwnedFd> fds;
  explicit ReceivedFds(const std::vector<int>& raw) {
    for (int fd : raw) fds.emplace_back(fd);
  }
};

// The other side's eventfd, checked: anything else could block our writes or be a file.
OwnedFd take_wake_fd(OwnedFd fd, const std::string& peer) {
  if (!is_eventfd(fd.get()))
    throw ProtocolError("shared memory: " + peer + " sent a wake-up descriptor that is not an eventfd");
  return fd;
}

void point_rings_at_wake(RingPair& p) {
  p.out.set_peer_wake_fd(p.peer_wake.get());
  p.in.set_peer_wake_fd(p.peer_wake.get());
}

}  // namespace

RingPair open_ring_pair(const std::string& path, const Hello& hello, int wake_fd, const std::string& peer,
                        Deadline deadline, Deadline busy_deadline, const Abandon& abandon) {
  RingPair p;
  const std::size_t bytes = ring_segment_bytes(hello.capacity);
  p.out_segment = Segment::create("distrl-ring-out", bytes);
  p.in_segment = Segment::create("distrl-ring-in", bytes);
  init_ring(p.out_segment.data(), hello.capacity);
  init_ring(p.in_segment.data(), hello.capacity);
  p.out = RingWriter(p.out_segment.data(), bytes, peer);
  p.in = RingReader(p.in_segment.data(), bytes, peer);
  p.socket = UnixSocket::connect(path, deadline, busy_deadline, abandon);
  std::vector<int> fds{p.out_segment.fd(), p.in_segment.fd()};
  if (wake_fd >= 0) fds.push_back(wake_fd);
  p.socket.send(kHello + " " + std::to_string(hello.capacity) + " " + hello.kind + " " + std::to_string(hello.rank),
                fds);
  return p;
}

void finish_ring_pair(RingPair& p, Deadline deadline, const Abandon& abandon) {
  std::vector<int> raw;
  const std::string answer = p.socket.receive(16, &raw, deadline, abandon);
  ReceivedFds got(raw);
  if (answer != kAnswer || got.fds.size() > 1)
    throw ProtocolError("shared memory: " + p.out.peer() + " answered the handshake with something else");
  if (!got.fds.empty()) {
    p.peer_wake = take_wake_fd(std::move(got.fds[0]), p.out.peer());
    point_rings_at_wake(p);
  }
}

RingPair admit_ring_pair(UnixSocket&& connection, Hello* hello, const std::string& peer, Deadline deadline) {
  RingPair p;
  p.socket = std::move(connection);
  std::vector<int> raw;
  const std::string text = p.socket.receive(128, &raw, deadline);
  ReceivedFds got(raw);
  std::istringstream in(text);
  std::string magic, rest;
  unsigned long long capacity = 0;
  Hello h;
  in >> magic >> capacity >> h.kind >> h.rank;
  const bool parsed = !in.fail() && !(in >> rest);
  const std::size_t want_fds = h.kind == "io" ? 3 : 2;
  if (magic != kHello || !parsed || capacity < 4096 || capacity > kMaxCapacity || (capacity & (capacity - 1)) != 0 ||
      (h.kind != "io" && h.kind != "channel" && h.kind != "plain") || h.rank < -1 || got.fds.size() != want_fds)
    throw ProtocolError("shared memory: " + peer + " opened with a malformed handshake ('" + text.substr(0, 64) +
                        "', " + std::to_string(got.fds.size()) + " descriptors)");
  h.capacity = static_cast<std::size_t>(capacity);
  const std::size_t bytes = ring_segment_bytes(h.capacity);
  // The peer's "out" is our input.
  p.in_segment = Segment::attach(got.fds[0].release(), bytes, peer + "'s ring to us");
  p.out_segment = Segment::attach(got.fds[1].release(), bytes, peer + "'s ring from us");
  p.in = RingReader(p.in_segment.data(), bytes, peer);
  p.out = RingWriter(p.out_segment.data(), bytes, peer);
  if (want_fds == 3) {
    p.peer_wake = take_wake_fd(std::move(got.fds[2]), peer);
    point_rings_at_wake(p);
  }
  if (hello != nullptr) *hello = h;
  return p;
}

void answer_ring_pair(RingPair& p, int wake_fd) {
  p.socket.send(kAnswer, wake_fd >= 0 ? std::vector<int>{wake_fd} : std::vector<int>{});
}

RingPair connect_ring_pair(const std::string& path, std::size_t capacity, const std::string& peer, Deadline deadline) {
  Hello h;
  h.capacity = capacity;
  RingPair p = open_ring_pair(path, h, -1, peer, deadline);
  finish_ring_pair(p, deadline);
  return p;
}

RingPair accept_ring_pair(UnixSocket& listener, const std::string& peer, Deadline deadline) {
  UnixSocket c = listener.accept(deadline);
  if (!c) throw TimeoutError("shared memory: no connection from " + peer + " before the deadline");
  RingPair p = admit_ring_pair(std::move(c), nullptr, peer, deadline);
  answer_ring_pair(p, -1);
  return p;
}

}  // namespace distrl::transport::detail
