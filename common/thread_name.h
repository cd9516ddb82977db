// Names the calling thread (as top -H, perf, gdb and /proc/<pid>/task/*/comm show it), so a
// profile says which of distrl's threads spends the time. Linux keeps 15 characters.
#pragma once

#include <pthread.h>

#include <string>

namespace distrl {

inline void name_this_thread(const std::string& name) {
  ::pthread_setname_np(::pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace distrl
