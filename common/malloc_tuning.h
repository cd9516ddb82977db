// Keeps large blocks on glibc's heap: mmap threshold 256 MiB, trim threshold 1 GiB, for the
// whole process, once. By default every block above 128 KiB (glibc's threshold grows only
// slowly) is a fresh mmap whose pages fault in again on every use (the measurements:
// docs/benchmarks.md, "Measurements behind decisions in the code"). The cost: up to 1 GiB of
// freed heap is kept by the process instead of returned to the system.
#pragma once

#include <malloc.h>

#include <mutex>

namespace distrl {

inline void keep_large_blocks_on_heap() {
  static std::once_flag once;
  std::call_once(once, [] {
    ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
}

}  // namespace distrl
