// Test helper: one child process (fork + exec), its stdout and stderr to a log file, in a
// process group of its own so that a kill reaches whatever it started (sh -c, ip netns exec).
// Destroying the object SIGKILLs the group and reaps the child unless it has exited: a failed
// assertion never leaves a process behind. Not thread-safe; one owner.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/multiproc.h"

namespace distrl::testing {

class ChildProcess {
 public:
  using Env = std::vector<std::pair<std::string, std::string>>;

  // argv[0] is a path (no PATH search); env is added to the child's environment.
  ChildProcess(const std::vector<std::string>& argv, std::string log, const Env& env = {}) : log_(std::move(log)) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  // A shell command line, run as `sh -c "exec CMD"`.
  static std::vector<std::string> shell(const std::string& cmd) { return {"/bin/sh", "-c", "exec " + cmd}; }

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (code_) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    transport::remove_ipc_files_of(pid_);
  }

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // The exit code (128 + signal when killed), or nothing if it still runs at the deadline.
  std::optional<int> wait_until(std::chrono::steady_clock::time_point deadline) {
    while (!code_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ = exit_code(status);
        transport::remove_ipc_files_of(pid_);  // one that was killed could not
      } else if (std::chrono::steady_clock::now() >= deadline) break;
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return code_;
  }
  // The same with a limit; -1 when it still runs after it.
  int wait_for(std::chrono::milliseconds limit) {
    return wait_until(std::chrono::steady_clock::now() + limit).value_or(-1);
  }
  std::string output() const { return read_file(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  std::optional<int> code_;
};

}  // namespace distrl::testing
