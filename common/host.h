// This machine's host name (gethostname), "localhost" when it has none: for messages that name
// where a process runs, run-lock records and file names. Thread-safe.
#pragma once

#include <unistd.h>

#include <string>

namespace distrl {

inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace distrl
