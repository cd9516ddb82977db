#include "common/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace distrl {
namespace {

std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

// Paths to unlink on a fatal signal: a slot is claimed (0 -> 1), filled, then published (2).
constexpr int kSlots = 64;
constexpr std::size_t kPathMax = 256;
std::atomic<int> g_slot_state[kSlots];
char g_slot_path[kSlots][kPathMax];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

void unlink_registered() {
  for (int i = 0; i < kSlots; ++i)
    if (g_slot_state[i].load() == 2) ::unlink(g_slot_path[i]);
}

extern "C" void on_fatal_signal(int sig) {
  unlink_registered();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, sig)) {  // the second one: out now
    unlink_registered();
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

void install_fatal_handlers_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = on_fatal_signal;
      ::sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      ::sigaction(sig, &sa, nullptr);
    }
  });
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

void remove_on_fatal_signal(const char* path) {
  if (std::strlen(path) >= kPathMax) return;
  install_fatal_handlers_once();
  for (int i = 0; i < kSlots; ++i) {
    int free_slot = 0;
    if (!g_slot_state[i].compare_exchange_strong(free_slot, 1)) continue;
    std::strncpy(g_slot_path[i], path, kPathMax - 1);
    g_slot_path[i][kPathMax - 1] = '\0';
    g_slot_state[i].store(2);
    return;
  }
}

RegisteredPathGuard::~RegisteredPathGuard() {
  if (path_.empty()) return;
  ::unlink(path_.c_str());
  forget_on_fatal_signal(path_.c_str());
}

void forget_on_fatal_signal(const char* path) {
  for (int i = 0; i < kSlots; ++i) {
    int published = 2;
    if (g_slot_state[i].load() == 2 && std::strncmp(g_slot_path[i], path, kPathMax) == 0 &&
        g_slot_state[i].compare_exchange_strong(published, 1)) {
      g_slot_state[i].store(0);
      return;
    }
  }
}

}  // namespace distrl
