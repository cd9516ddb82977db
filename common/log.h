// Minimal thread-safe logging to stderr with a process tag ("[agent] ", "[rank 3] ").
// Levels come from DISTRL_LOG_LEVEL (debug, info, warn, error; default info).
#pragma once

#include <atomic>
#include <chrono>
#include <sstream>
#include <string>

namespace distrl {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_log_tag(const std::string& tag);
void set_log_level(LogLevel level);
bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& message);

// Lets at most one line through per interval; counts the ones it held back.
class RateLimiter {
 public:
  explicit RateLimiter(std::chrono::milliseconds interval) : interval_ns_(interval.count() * 1000000) {}
  // Returns true when a line may be printed; *suppressed gets how many were held back since.
  bool allow(long* suppressed);

 private:
  long long interval_ns_;
  std::atomic<long long> last_ns_{0};
  std::atomic<long> held_{0};
};

}  // namespace distrl

#define DISTRL_LOG(level, expr)                                            \
  do {                                                                     \
    if (::distrl::log_enabled(::distrl::LogLevel::level)) {                \
      std::ostringstream distrl_log_os_;                                   \
      distrl_log_os_ << expr;                                              \
      ::distrl::log_line(::distrl::LogLevel::level, distrl_log_os_.str()); \
    }                                                                      \
  } while (0)
