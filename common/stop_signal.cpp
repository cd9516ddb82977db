#include "common/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace distrl {
namespace {

std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, sig)) {  // the second one: out now
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop.load(std::memory_order_relaxed); }

int stop_exit_code() {
  const int s = stop_signal();
  return s ? 128 + s : 0;
}

const char* stop_signal_name() {
  switch (stop_signal()) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case 0: return "";
    default: return "a signal";
  }
}

void set_stop_signal_for_test(int sig) { g_stop.store(sig); }

}  // namespace distrl
