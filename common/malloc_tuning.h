// Keeps large blocks on glibc's heap: mmap threshold 256 MiB, trim threshold 1 GiB, for the
// whole process, once. By default every block above 128 KiB (glibc's threshold grows only
// slowly) is a fresh mmap whose pages fault in again on every use: measured, a 16 MiB
// all-reduce after small ones ran 2-3x slower, and the model-on-server's CNN forward on the
// server's handler threads spent 14% of its time in page faults. The cost: up to 1 GiB of
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
