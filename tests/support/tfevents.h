// Reads a run directory's TensorBoard event files with TensorBoard's own reader
// (tests/support/read_tfevents.py) under the Python that has the `tensorboard` package:
// DISTRL_REFERENCE_PYTHON (`make test` points it at its reference venv), else python3.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace distrl::testing {

struct TfeventsRead {
  bool ran = false;  // false: no reader here; `why` says so (the caller skips that check)
  int code = -1;
  std::string out, why;  // out: "tag step value" lines, sorted by tag
  // Lines of tag `tag`.
  int points(const std::string& tag) const {
    int n = 0;
    for (std::size_t at = 0; (at = out.find(tag + " ", at)) != std::string::npos; at += tag.size())
      if (at == 0 || out[at - 1] == '\n') ++n;
    return n;
  }
};

inline TfeventsRead read_tfevents(const std::string& dir) {
  const char* env = std::getenv("DISTRL_REFERENCE_PYTHON");
  const std::string python = env && *env ? env : "python3";
  const std::string script = std::string(DISTRL_SOURCE_DIR) + "/tests/support/read_tfevents.py";
  TfeventsRead r;
  FILE* p = ::popen((python + " " + script + " " + dir + " 2>&1").c_str(), "r");
  if (!p) {
    r.why = "cannot start " + python;
    return r;
  }
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p)) r.out += buf.data();
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (r.code == 3 || r.code == 127) {
    r.why = "no TensorBoard reader (" + python + ": " + r.out +
            "); `make test` installs one, or set DISTRL_REFERENCE_PYTHON";
    return r;
  }
  r.ran = true;
  return r;
}

// The event files in dir.
inline int count_event_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) ++n;
  return n;
}

}  // namespace distrl::testing
