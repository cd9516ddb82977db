// Reads a run directory's TensorBoard event files with TensorBoard's own reader
// (tests/support/read_tfevents.py) under the reference Python (reference_python.h).
#pragma once

#include <filesystem>
#include <string>

#include "tests/support/reference_python.h"

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
  const PythonRun run = run_reference_python("read_tfevents.py", dir, "TensorBoard reader");
  return TfeventsRead{run.ran, run.code, run.out, run.why};
}

// The event files in dir.
inline int count_event_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) ++n;
  return n;
}

}  // namespace distrl::testing
