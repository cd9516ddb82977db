#include "common/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>  // program_invocation_short_name (GNU)
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/host.h"
#include "common/log.h"
#include "common/run_dir.h"

namespace distrl {
namespace {

constexpr const char* kLockName = ".distrl-run.lock";
constexpr const char* kFdVariable = "DISTRL_RUN_LOCK_FD";

bool same_file(int a, int b) {
  struct stat sa {
  }, sb{};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The fd DISTRL_RUN_LOCK_FD names when it is a well-formed, open one; else -1.
int inherited_fd() {
  const char* v = std::getenv(kFdVariable);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || fd < 0 || fd >= (1 << 20) || ::fcntl(static_cast<int>(fd), F_GETFD) < 0) return -1;
  return static_cast<int>(fd);
}

// The launcher's claim on this very file, inherited: DISTRL_RUN_LOCK_FD names an open fd of it.
bool inherited(int fd) {
  const int other = inherited_fd();
  return other >= 0 && other != fd && same_file(fd, other);
}

// The holder's own words: "pid host tool since" as written below; empty fields when unreadable.
struct Holder {
  long pid = 0;
  std::string host, tool, since;
};

Holder read_holder(int fd) {
  Holder h;
  char buf[512] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return h;
  std::istringstream in(std::string(buf, static_cast<std::size_t>(n)));
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    if (k == "pid") h.pid = std::atol(v.c_str());
    else if (k == "host") h.host = v;
    else if (k == "tool") h.tool = v;
    else if (k == "since") h.since = v;
  }
  return h;
}

// The lock file at path, opened without following a link, and only when it is a regular file
// of this user: a link planted there (to a file the run would then truncate and write), a FIFO
// or another user's file is refused, naming it. -1 (errno set) when there is none and flags do
// not create it.
int open_lock_file(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ELOOP)
      throw OutputError("'" + path +
                        "' is a symbolic link: refused (a run's lock file is a regular file it makes; "
                        "remove the link, or choose another run.out_dir)");
    return -1;
  }
  struct stat st {};
  std::string wrong;
  if (::fstat(fd, &st) != 0) wrong = std::string("cannot be examined (") + std::strerror(errno) + ")";
  else if (!S_ISREG(st.st_mode)) wrong = "is not a regular file";
  else if (st.st_uid != ::geteuid())
    wrong =
        "belongs to uid " + std::to_string(st.st_uid) + ", not to this process's uid " + std::to_string(::geteuid());
  if (!wrong.empty()) {
    ::close(fd);
    throw OutputError("'" + path + "' " + wrong +
                      ": refused as a run's lock file (remove it, or choose another run.out_dir)");
  }
  return fd;
}

bool runs_here(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

// The refusal for a directory whose lock file (open as fd) a live run holds: who, since when,
// and how to go on.
std::string in_use_message(const std::string& dir, const std::string& path, int fd) {
  const Holder h = read_holder(fd);
  const std::string who = (h.tool.empty() ? std::string("another run") : h.tool) +
                          (h.pid > 0 ? " (pid " + std::to_string(h.pid) + " on " + h.host + ")" : std::string()) +
                          (h.since.empty() ? "" : ", since " + h.since);
  std::string gone;
  if (h.pid > 0 && h.host == host_name() && !runs_here(h.pid))
    gone = " (pid " + std::to_string(h.pid) +
           " has exited, but processes it started still run and hold the "
           "directory: `fuser -v " +
           path + "` lists them)";
  return "run.out_dir '" + dir + "' is in use by " + who + gone +
         ": two runs in one directory overwrite each other's outputs. Wait for it to finish, or give this run "
         "another directory (run.out_dir=" +
         dir + "-2)" +
         (RunLock::forced() ? " (--force moves a finished run's outputs aside; it cannot take a directory a live run "
                              "writes to)"
                            : "");
}

// A resumed run's directory: its identity is the run's (check_resume compared it with the
// checkpoint's); a directory without one (a resume into a new directory) takes the checkpoint's.
void adopt_for_resume(const std::string& dir, const std::string& tool) {
  if (const auto id = read_run_identity(dir)) {
    this_run().run = id->run;
  } else if (!this_run().run.empty()) {  // a tool that read the checkpoint (not a launcher)
    RunIdentity id = new_run_identity(tool);
    id.run = this_run().run;
    write_run_identity(dir, id);
  }
}

}  // namespace

bool RunLock::forced() {
  const char* force = std::getenv("DISTRL_RUN_LOCK_FORCE");
  return force != nullptr && std::string(force) == "1";
}

RunLock::RunLock(const std::string& dir) {
  const std::string tool = program_invocation_short_name;  // distrl-launch, distrl-agent, distrl-train ...
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw OutputError("cannot create run.out_dir '" + dir + "': " + ec.message() + " (choose another run.out_dir)");
  const std::string path = (std::filesystem::path(dir) / kLockName).string();
  const int fd = open_lock_file(path, O_RDWR | O_CREAT);
  if (fd < 0)
    throw OutputError("cannot open '" + path + "': " + std::strerror(errno) + " (choose a writable run.out_dir)");
  if (inherited(fd)) {  // the launcher that started this process holds it and made the directory this run's
    ::close(fd);
    if (this_run().resume) adopt_for_resume(dir, tool);
    else if (const auto id = read_run_identity(dir)) this_run().run = id->run;
    return;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK && !writes_outputs_here()) {
      // A lead rank on another node than node 0 (a pipeline's last stage, a ps's first trainer)
      // over a shared file system: node 0's launcher holds the claim for this very run.
      ::close(fd);
      if (const auto id = read_run_identity(dir)) this_run().run = id->run;
      return;
    }
    const std::string why = err == EWOULDBLOCK ? in_use_message(dir, path, fd) : "";
    ::close(fd);
    if (err != EWOULDBLOCK)
      throw OutputError("cannot lock '" + path + "': " + std::strerror(err) + " (choose another run.out_dir)");
    throw ConfigError(why);
  }
  try {  // the directory becomes this run's: a fresh run's own, or the one it resumes
    const auto mine = restarted() ? read_run_identity(dir) : std::nullopt;
    if (mine) {  // restarted after a failure, with no launcher claim to inherit: its own run goes on
      this_run().run = mine->run;
    } else if (!this_run().resume) {
      check_fresh(dir, forced());
      if (forced()) move_outputs_aside(dir, tool);
      const RunIdentity id = new_run_identity(tool);
      write_run_identity(dir, id);
      this_run().run = id.run;
    } else {
      adopt_for_resume(dir, tool);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  fd_ = fd;
  const std::string text = "pid=" + std::to_string(::getpid()) + " host=" + host_name() + " tool=" + tool +
                           " since=" + local_time_now() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    DISTRL_LOG(Warn, tool << ": cannot write " << path << " (" << std::strerror(errno)
                          << "); the directory is claimed all the same");
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // the claim ends with the last process that has it open
}

void RunLock::check_before_start(const std::string& dir) {
  if (!writes_outputs_here()) return;  // node 0 checks and claims for the run
  refuse_if_claimed(dir);
  if (!this_run().resume) check_fresh(dir, forced());
}

void RunLock::refuse_if_claimed(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kLockName).string();
  const int fd = open_lock_file(path, O_RDONLY);
  if (fd < 0) return;                                          // never claimed
  if (inherited(fd) || ::flock(fd, LOCK_SH | LOCK_NB) == 0) {  // ours, or nobody's
    ::close(fd);
    return;
  }
  const std::string why = in_use_message(dir, path, fd);
  ::close(fd);
  throw ConfigError(why);
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void RunLock::keep_inherited_claim_here() {
  const int fd = inherited_fd();
  if (fd >= 0) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
}

void RunLock::hand_to_children() {
  if (fd_ < 0) return;
  const int flags = ::fcntl(fd_, F_GETFD);
  if (flags >= 0) ::fcntl(fd_, F_SETFD, flags & ~FD_CLOEXEC);
  ::setenv(kFdVariable, std::to_string(fd_).c_str(), 1);
}

}  // namespace distrl
