#include "transport/link/shm/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/stop_signal.h"
#include "common/error.h"

namespace distrl::transport::detail {
namespace {

constexpr std::size_t kMaxFds = 16;

[[noreturn]] void fail(const std::string& what) {
  throw TransportError("unix socket: " + what + ": " + std::strerror(errno));
}

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(a.sun_path))
    throw TransportError("unix socket: the path '" + path + "' is empty or longer than " +
                         std::to_string(sizeof(a.sun_path) - 1) + " bytes (choose a shorter run directory)");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

bool out_of_descriptors(int e) { return e == EMFILE || e == ENFILE || e == ENOMEM || e == ENOBUFS; }

int new_socket() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 && out_of_descriptors(errno))
    throw OutOfDescriptors(std::string("unix socket: socket: ") + std::strerror(errno));
  if (fd < 0) fail("socket");
  return fd;
}

int ms_until(UnixSocket::Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - UnixSocket::Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000));
}

}  // namespace

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

OwnedFd& OwnedFd::operator=(OwnedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

bool is_eventfd(int fd) {
  char target[64] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  const int flags = fcntl(fd, F_GETFL);
  // Non-blocking too: a write to a full blocking eventfd would hold our thread.
  return n > 0 && std::string(target, static_cast<std::size_t>(n)) == "anon_inode:[eventfd]" && flags >= 0 &&
         (flags & O_NONBLOCK) != 0;
}

UnixSocket::~UnixSocket() { close(); }
UnixSocket::UnixSocket(UnixSocket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
UnixSocket& UnixSocket::operator=(UnixSocket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void UnixSocket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

UnixSocket UnixSocket::listen(const std::string& path) {
  const sockaddr_un a = address(path);
  UnixSocket s(new_socket());
  ::unlink(path.c_str());
  // fchmod before bind sets the mode the socket file is created with (Linux), so there is no
  // moment at which another user could connect.
  if (fchmod(s.fd_, 0600) != 0) fail("fchmod " + path);
  if (::bind(s.fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) fail("bind " + path);
  remove_on_fatal_signal(path.c_str());
  RegisteredPathGuard file(path);  // a failure below leaves neither the file nor its slot
  if (::chmod(path.c_str(), 0600) != 0) fail("chmod " + path);
  if (::listen(s.fd_, 64) != 0) fail("listen " + path);
  file.release();  // the listener's owner removes it
  return s;
}

UnixSocket UnixSocket::connect(const std::string& path, Clock::time_point deadline, Clock::time_point busy_deadline,
                               const Abandon& abandon) {
  const sockaddr_un a = address(path);
  if (busy_deadline == Clock::time_point::min()) busy_deadline = deadline;
  for (auto pause = std::chrono::microseconds(200);; pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
    // Non-blocking: a listener whose backlog is full (its process stopped) answers EAGAIN
    // instead of holding this thread; the connection is made blocking again once it stands.
    UnixSocket s(new_socket());
    const int flags = fcntl(s.fd_, F_GETFL);
    if (flags < 0 || fcntl(s.fd_, F_SETFL, flags | O_NONBLOCK) != 0) fail("fcntl");
    if (::connect(s.fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
      if (fcntl(s.fd_, F_SETFL, flags) != 0) fail("fcntl");
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(s.fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) fail("SO_PEERCRED");
      if (cred.uid != geteuid())
        throw WrongListener("unix socket: the listener at " + path + " runs as uid " + std::to_string(cred.uid) +
                            " (pid " + std::to_string(cred.pid) + "), not as this process's uid " +
                            std::to_string(geteuid()) + ": refused, nothing was sent to it");
      return s;
    }
    if (errno != ENOENT && errno != ECONNREFUSED && errno != EAGAIN) fail("connect " + path);
    if (Clock::now() >= (errno == EAGAIN ? busy_deadline : deadline)) {
      if (errno == EAGAIN)
        throw ListenerBusy("unix socket: the listener at " + path +
                           " has a full backlog (its process is stopped, "
                           "or too busy to accept)");
      throw TimeoutError("unix socket: nobody listens at " + path + " (" + std::strerror(errno) + ")");
    }
    if (abandon && abandon()) throw Abandoned("unix socket: connecting to " + path + " given up");
    std::this_thread::sleep_for(pause);
  }
}

DescriptorBudget descriptor_budget() {
  DescriptorBudget b;
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) b.limit = r.rlim_cur == RLIM_INFINITY ? -1 : static_cast<long>(r.rlim_cur);
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++b.open;
  return b;
}

bool UnixSocket::refuse_one() {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

UnixSocket UnixSocket::accept(Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, ms_until(deadline));
    if (r < 0 && errno != EINTR) fail("poll");
    if (r > 0) {
      UnixSocket s(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
      if (s.fd_ < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
        if (out_of_descriptors(errno)) {
          const auto budget = descriptor_budget();
          throw OutOfDescriptors("unix socket: accept: " + std::string(std::strerror(errno)) + " (" +
                                 std::to_string(budget.open) + " descriptors open, the limit is " +
                                 std::to_string(budget.limit) + ": raise it with ulimit -n)");
        }
        fail("accept");
      }
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(s.fd_, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) fail("SO_PEERCRED");
      if (cred.uid != geteuid())
        throw TransportError("unix socket: refused a connection from uid " + std::to_string(cred.uid) + " (pid " +
                             std::to_string(cred.pid) + "): shared memory is for processes of uid " +
                             std::to_string(geteuid()) + " only");
      return s;
    }
    if (Clock::now() >= deadline) return UnixSocket();
  }
}

void UnixSocket::send(const std::string& bytes, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds) throw ArgumentError("unix socket: at most 16 descriptors per message");
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do n = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) fail("send");
  if (static_cast<std::size_t>(n) != bytes.size())
    throw TransportError("unix socket: a handshake message was cut short");
}

std::string UnixSocket::receive(std::size_t max_bytes, std::vector<int>* fds, Clock::time_point deadline,
                                const Abandon& abandon) {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, abandon ? std::min(ms_until(deadline), 10) : ms_until(deadline));
    if (r < 0 && errno != EINTR) fail("poll");
    if (r > 0) break;
    if (Clock::now() >= deadline) throw TimeoutError("unix socket: no message from the peer before the deadline");
    if (abandon && abandon()) throw Abandoned("unix socket: waiting for the peer's message given up");
  }
  std::string bytes(max_bytes, '\0');
  iovec iov{bytes.data(), bytes.size()};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(fd_, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) fail("receive");
  // Take every descriptor that arrived, even from a message we then refuse, so none leaks.
  std::vector<int> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < k; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      got.push_back(fd);
    }
  }
  auto refuse = [&](const std::string& why) {
    for (int fd : got) ::close(fd);
    throw TransportError("unix socket: " + why);
  };
  if (n == 0) refuse("closed by the peer");
  if ((m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) != 0) refuse("a handshake message or its descriptors were cut short");
  if (fds == nullptr && !got.empty()) refuse("descriptors arrived where none were expected");
  bytes.resize(static_cast<std::size_t>(n));
  if (fds != nullptr) *fds = std::move(got);
  return bytes;
}

bool UnixSocket::peer_closed() const {
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace distrl::transport::detail
