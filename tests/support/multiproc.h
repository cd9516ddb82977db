// Test helpers: fork-per-rank runs with deadlines, temp dirs. Fork before any thread or
// ZeroMQ context exists in the parent; children report through exit codes.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/bootstrap/rendezvous.h"

namespace distrl::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "distrl-test-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Creates an empty file: a one-way signal between forked ranks or processes.
inline void touch(const std::string& path) { std::ofstream(path).flush(); }

// Polls done() every 10 ms until it is true (returns true) or the deadline passes (false).
inline bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Waits until path exists; false at the deadline.
inline bool wait_for_file(const std::string& path, std::chrono::milliseconds deadline) {
  return wait_until([&] { return std::filesystem::exists(path); }, deadline);
}

// A whole file as a string ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A waitpid status as a shell would report it: the exit code, or 128 + the signal.
inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Starts one child per rank; each runs fn(rank) and exits with its return value (1 if it
// throws). Children still running at the deadline are SIGKILLed (exit code 137).
// Returns the exit codes in rank order.
inline std::vector<int> run_ranks(int world, const std::function<int(int)>& fn,
                                  std::chrono::seconds deadline = std::chrono::seconds(60)) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = fn(r);
      } catch (const std::exception& e) {
        std::cerr << "rank " << r << " threw: " << e.what() << std::endl;
      }
      std::cout.flush();
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(world, -1);
  const auto until = std::chrono::steady_clock::now() + deadline;
  int left = world;
  while (left > 0) {
    for (int r = 0; r < world; ++r) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = exit_code(status);
        transport::remove_ipc_files_of(pids[r]);  // a rank that threw or was killed left them
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > until) {
      for (int r = 0; r < world; ++r)
        if (codes[r] == -1) {
          std::cerr << "rank " << r << " missed the test deadline; killing it" << std::endl;
          ::kill(pids[r], SIGKILL);
        }
      deadline = std::chrono::seconds(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

}  // namespace distrl::testing
