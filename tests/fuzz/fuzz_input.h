// What the fuzz targets share: one input <-> several frames, the invariant check, and the
// entry point macro. A target is a function `int fuzz_<name>(const uint8_t*, size_t)` plus
// `std::vector<std::string> seeds_<name>()` (well-formed inputs to start from); fuzz_targets()
// lists them for the corpus replay test and distrl-fuzz-seeds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/log.h"

namespace distrl::fuzz {

// Warnings only (a refused request logs one): the fuzzer's own output stays readable.
inline void quiet_logs() {
  static const bool once = (set_log_level(LogLevel::Error), true);
  (void)once;
}

// Input layout: [u8 frame count] then count - 1 times [u16 LE size][bytes]; the last frame is
// the rest. A count of 0 reads as 1; frames past max_frames are not made. Short input just
// gives fewer or shorter frames: every byte string is some split.
inline std::vector<std::string> split_frames(const std::uint8_t* data, std::size_t size, std::size_t max_frames) {
  std::vector<std::string> out;
  if (size == 0) return out;
  std::size_t count = data[0] ? data[0] : 1, at = 1;
  if (count > max_frames) count = max_frames;
  for (std::size_t i = 0; i + 1 < count && at + 2 <= size; ++i) {
    std::size_t n = data[at] | (std::size_t(data[at + 1]) << 8);
    at += 2;
    if (n > size - at) n = size - at;
    out.emplace_back(reinterpret_cast<const char*>(data + at), n);
    at += n;
  }
  out.emplace_back(reinterpret_cast<const char*>(data + at), size - at);
  return out;
}

// The inverse, for seeds (frames but the last must be under 64 KiB).
inline std::string join_frames(const std::vector<std::string>& frames) {
  std::string s(1, static_cast<char>(frames.size()));
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size()) {
      s.push_back(static_cast<char>(frames[i].size() & 0xff));
      s.push_back(static_cast<char>(frames[i].size() >> 8));
    }
    s += frames[i];
  }
  return s;
}

struct Target {
  const char* name;
  int (*run)(const std::uint8_t*, std::size_t);
  std::vector<std::string> (*seeds)();
};
const std::vector<Target>& fuzz_targets();

}  // namespace distrl::fuzz

// A broken invariant is a finding: say which, then abort (libFuzzer saves the input).
#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

// In a libFuzzer build (-DDISTRL_LIBFUZZER) each target file is its own fuzzer binary.
#ifdef DISTRL_LIBFUZZER
#define DISTRL_FUZZ_ENTRY(fn) \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { return fn(data, size); }
#else
#define DISTRL_FUZZ_ENTRY(fn)
#endif
