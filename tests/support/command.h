// Runs a shell command (a real binary) and captures its exit code and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace distrl::testing {

struct CommandResult {
  int code;
  std::string output;  // stdout and stderr
};

inline CommandResult run_command(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A tool in the build's bin/ directory (DISTRL_BIN_DIR comes from tests/CMakeLists.txt).
inline std::string bin_path(const std::string& tool) { return std::string(DISTRL_BIN_DIR) + "/" + tool; }

// distrl-launch ARGS.
inline CommandResult launch(const std::string& args) { return run_command(bin_path("distrl-launch") + " " + args); }

}  // namespace distrl::testing
