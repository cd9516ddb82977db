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

// distrl-launch ARGS; CTest sets DISTRL_LAUNCH to the built binary.
inline CommandResult launch(const std::string& args) {
  const char* bin = std::getenv("DISTRL_LAUNCH");
  EXPECT_NE(bin, nullptr) << "DISTRL_LAUNCH is set by CTest";
  return run_command(std::string(bin ? bin : "distrl-launch") + " " + args);
}

// A sibling of distrl-launch in the build's bin/ directory.
inline std::string bin_path(const std::string& tool) {
  const char* bin = std::getenv("DISTRL_LAUNCH");
  std::string dir = bin ? std::string(bin) : std::string("distrl-launch");
  auto slash = dir.rfind('/');
  return (slash == std::string::npos ? std::string(".") : dir.substr(0, slash)) + "/" + tool;
}

}  // namespace distrl::testing
