// CPU time used so far, in microseconds (user + system), for per-request cost figures in the
// benchmarks and run summaries. Both are cheap system calls; thread-safe.
#pragma once

#include <sys/resource.h>
#include <time.h>

namespace distrl {

// The whole process (every thread).
inline double process_cpu_us() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}

// The calling thread only.
inline double thread_cpu_us() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

}  // namespace distrl
