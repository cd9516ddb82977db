#include "transport/link/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace distrl::transport::detail {
namespace {

[[noreturn]] void fail(const std::string& call, const std::string& what) {
  throw TransportError("shared memory: " + call + " failed for " + what + ": " + std::strerror(errno));
}

constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW;

}  // namespace

Segment Segment::create(const std::string& name, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  // A memfd counts as a file: sizing one past RLIMIT_FSIZE would raise SIGXFSZ (which kills
  // the process) instead of failing, so look first.
  rlimit fsize{};
  if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && bytes > fsize.rlim_cur) {
    errno = EFBIG;
    fail("sizing (over the file-size limit, ulimit -f)", name);
  }
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) fail("memfd_create", name);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 || fcntl(fd, F_ADD_SEALS, kSeals | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    fail("sizing and sealing", name);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    errno = e;
    fail("mmap", name);
  }
  return Segment(fd, p, bytes);
}

Segment Segment::attach(int fd, std::size_t expect_bytes, const std::string& what) {
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  std::string why;
  if (fstat(fd, &st) != 0) {
    why = std::string("fstat: ") + std::strerror(errno);
  } else if (seals < 0 || (seals & kSeals) != kSeals) {
    why = "the peer's descriptor is not a memfd sealed against shrinking and growing";
  } else if (st.st_size <= 0 || (expect_bytes != 0 && static_cast<std::size_t>(st.st_size) != expect_bytes)) {
    why = "the peer's segment has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(expect_bytes);
  }
  if (!why.empty()) {
    close(fd);
    throw TransportError("shared memory: refused " + what + ": " + why);
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    close(fd);
    errno = e;
    fail("mmap", what);
  }
  return Segment(fd, p, bytes);
}

Segment::~Segment() { reset(); }

Segment::Segment(Segment&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void Segment::reset() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

}  // namespace distrl::transport::detail
