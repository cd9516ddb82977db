// Unix-domain stream sockets that carry shared-memory descriptors between processes of one
// host and signal a peer's death: the kernel closes a dead process's socket, so the other end
// reads EOF at once (SIGKILL included). A connection is accepted only from a process of our
// own user (SO_PEERCRED), and the listening socket is made 0600: shared memory reaches only
// the same user. Every call that can wait has a deadline. Private to transport/ (the shared-memory link).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace distrl::transport::detail {

// accept() found this process (EMFILE) or the system (ENFILE, ENOMEM, ENOBUFS) out of
// descriptors or memory: the connection stays in the listener's backlog.
struct OutOfDescriptors : TransportError {
  using TransportError::TransportError;
};

// connect() found the listener's backlog full (EAGAIN: its process is stopped or too busy to
// accept): it is there, just not accepting now.
struct ListenerBusy : TransportError {
  using TransportError::TransportError;
};

// The listener at a path runs as another uid than ours: it could be anyone's process that took
// the path of one that exited. Refused on connect, before any descriptor is sent.
struct WrongListener : TransportError {
  using TransportError::TransportError;
};

// A wait given up because its caller's `abandon` said so (the caller knows why: the peer was
// reported down, the process shuts down).
struct Abandoned : TransportError {
  using TransportError::TransportError;
};

// Asked between a wait's slices (every 10 ms at most): true gives the wait up (Abandoned).
using Abandon = std::function<bool()>;

// This process's descriptor limit (RLIMIT_NOFILE, soft) and how many it has open now.
struct DescriptorBudget {
  long limit = 0, open = 0;
};
DescriptorBudget descriptor_budget();

// A descriptor we own: closed when destroyed.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.release()) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// True when fd is a non-blocking eventfd (a peer's wake-up descriptor is checked before we
// write to it: anything else could block or be a file).
bool is_eventfd(int fd);

class UnixSocket {
 public:
  using Clock = std::chrono::steady_clock;
  UnixSocket() = default;
  explicit UnixSocket(int fd) : fd_(fd) {}
  ~UnixSocket();
  UnixSocket(UnixSocket&& o) noexcept;
  UnixSocket& operator=(UnixSocket&& o) noexcept;
  UnixSocket(const UnixSocket&) = delete;
  UnixSocket& operator=(const UnixSocket&) = delete;

  // Listens at `path` (a stale socket file there is replaced), mode 0600. TransportError naming
  // the path when it cannot (too long for sun_path: 107 bytes; no such directory).
  static UnixSocket listen(const std::string& path);
  // Connects to a listener at path, retrying while it is not there yet (until `deadline`) or
  // its backlog is full (until `busy_deadline`, by default the same). Then: TimeoutError when
  // nobody listens there (ENOENT, ECONNREFUSED), ListenerBusy when one does with a full backlog;
  // OutOfDescriptors when this process has none left for the socket; WrongListener (closed at
  // once, nothing sent) when the listener runs as another uid (SO_PEERCRED: the credentials it
  // listened with).
  static UnixSocket connect(const std::string& path, Clock::time_point deadline,
                            Clock::time_point busy_deadline = Clock::time_point::min(), const Abandon& abandon = {});
  // A connection from a process of our own user; an empty socket at the deadline. A connection
  // from another user is closed and refused (TransportError naming its uid); OutOfDescriptors
  // when none is left to accept it with.
  UnixSocket accept(Clock::time_point deadline);
  // Accepts the first waiting connection and closes it at once (its caller reads EOF): how a
  // listener out of descriptors empties its backlog, with one descriptor set free for it. False
  // when none was waiting or it could not.
  bool refuse_one();

  // Sends bytes with descriptors attached (SCM_RIGHTS; the descriptors stay ours). Small
  // messages only (the handshake): sent whole or TransportError.
  void send(const std::string& bytes, const std::vector<int>& fds = {});
  // Receives one message of at most max_bytes and the descriptors sent with it (ours to close);
  // TransportError on EOF ("closed") or error, TimeoutError at the deadline, Abandoned when
  // `abandon` says so first.
  std::string receive(std::size_t max_bytes, std::vector<int>* fds, Clock::time_point deadline,
                      const Abandon& abandon = {});
  // Non-blocking: true when the peer closed its end or the connection failed.
  bool peer_closed() const;

  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

}  // namespace distrl::transport::detail
