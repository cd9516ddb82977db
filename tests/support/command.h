// Runs a shell command (a real binary) and captures its exit code and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

namespace distrl::testing {

struct CommandResult {
  int code;
  std::string output;  // stdout and stderr
};

// on_line (optional) sees each output line as it comes, e.g. to act on a running job.
inline CommandResult run_command(const std::string& cmd,
                                 const std::function<void(const std::string& line)>& on_line = {}) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p)) {
    const std::string line = buf.data();
    out += line;
    if (on_line) on_line(line);
  }
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A tool in the build's bin/ directory (DISTRL_BIN_DIR comes from tests/CMakeLists.txt).
inline std::string bin_path(const std::string& tool) { return std::string(DISTRL_BIN_DIR) + "/" + tool; }

// distrl-launch ARGS.
inline CommandResult launch(const std::string& args, const std::function<void(const std::string&)>& on_line = {}) {
  return run_command(bin_path("distrl-launch") + " " + args, on_line);
}

// distrl-launch ARGS, sent `sig` (once) at the first output line for which when(line) is true
// — Ctrl-C in the middle of a run, as a user presses it.
inline CommandResult launch_interrupted(const std::string& args, const std::function<bool(const std::string&)>& when,
                                        int sig) {
  pid_t launcher = 0;
  bool sent = false;
  return run_command("echo PID $$; exec " + bin_path("distrl-launch") + " " + args, [&](const std::string& line) {
    if (line.rfind("PID ", 0) == 0) launcher = std::stoi(line.substr(4));
    else if (!sent && launcher > 0 && when(line)) {
      ::kill(launcher, sig);
      sent = true;
    }
  });
}
// ... at the first line that contains `text`.
inline CommandResult launch_interrupted(const std::string& args, const std::string& text, int sig) {
  return launch_interrupted(
      args, [&](const std::string& line) { return line.find(text) != std::string::npos; }, sig);
}

}  // namespace distrl::testing
