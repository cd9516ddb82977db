#include "common/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/error.h"

namespace distrl {
namespace {

std::mutex& tag_mutex() {
  static std::mutex m;
  return m;
}
std::string& tag() {
  static std::string t;
  return t;
}

LogLevel level_from_env() {
  const char* v = std::getenv("DISTRL_LOG_LEVEL");
  if (!v) return LogLevel::Info;
  if (!std::strcmp(v, "debug")) return LogLevel::Debug;
  if (!std::strcmp(v, "warn")) return LogLevel::Warn;
  if (!std::strcmp(v, "error")) return LogLevel::Error;
  return LogLevel::Info;
}

std::atomic<int>& level() {
  static std::atomic<int> l{static_cast<int>(level_from_env())};
  return l;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
  }
  return "?";
}

}  // namespace

void set_log_tag(const std::string& t) {
  std::lock_guard<std::mutex> lock(tag_mutex());
  tag() = t;
}

void set_log_level(LogLevel l) { level().store(static_cast<int>(l)); }

bool log_enabled(LogLevel l) { return static_cast<int>(l) >= level().load(std::memory_order_relaxed); }

void log_line(LogLevel l, const std::string& message) {
  std::string line;
  {
    std::lock_guard<std::mutex> lock(tag_mutex());
    if (!tag().empty()) line = "[" + tag() + "] ";
  }
  if (l != LogLevel::Info) line += level_name(l);
  if (l == LogLevel::Debug) {
    // Debug lines carry CLOCK_MONOTONIC seconds: one clock for every process on the host, so
    // traces of several processes can be merged and ordered.
    char stamp[32];
    const auto ms =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    std::snprintf(stamp, sizeof stamp, " %lld.%06lld", static_cast<long long>(ms / 1000000),
                  static_cast<long long>(ms % 1000000));
    line += stamp;
  }
  if (l != LogLevel::Info) line += ": ";
  line += message;
  line += '\n';
  // One write per line so lines from threads and processes do not interleave.
  std::fwrite(line.data(), 1, line.size(), stderr);
}

bool RateLimiter::allow(long* suppressed) {
  long long now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  long long last = last_ns_.load();
  if (now - last >= interval_ns_ && last_ns_.compare_exchange_strong(last, now)) {
    *suppressed = held_.exchange(0);
    return true;
  }
  held_.fetch_add(1);
  return false;
}

namespace detail {
void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(std::string("internal check failed: ") + expr + " at " + file + ":" + std::to_string(line) + ": " + msg);
}
}  // namespace detail

}  // namespace distrl
