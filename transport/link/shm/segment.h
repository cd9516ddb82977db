// A shared-memory segment: an anonymous memfd (no name under /dev/shm, so nothing is left
// behind when a process is SIGKILLed: the memory goes with the last descriptor and mapping),
// sealed against shrinking and growing, mapped read-write. Handed to a peer as a descriptor
// over a Unix socket (unix_socket.h). Private to transport/ (the shared-memory link).
#pragma once

#include <cstddef>
#include <string>

namespace distrl::transport::detail {

class Segment {
 public:
  Segment() = default;
  // A new segment of `bytes` (rounded up to whole pages), zero-filled. `name` shows in
  // /proc/<pid>/fd. Throws TransportError naming the failed call.
  static Segment create(const std::string& name, std::size_t bytes);
  // Maps a segment a peer created: takes ownership of fd. Refuses (TransportError, fd closed) a
  // descriptor that is not a memfd sealed against shrinking — a peer that could truncate it
  // would make our reads fault (SIGBUS) — or whose size is not `expect_bytes` (0: any).
  static Segment attach(int fd, std::size_t expect_bytes, const std::string& what);
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  int fd() const { return fd_; }  // to pass to a peer; owned here
  explicit operator bool() const { return data_ != nullptr; }

 private:
  Segment(int fd, void* data, std::size_t size) : fd_(fd), data_(data), size_(size) {}
  void reset();
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace distrl::transport::detail
