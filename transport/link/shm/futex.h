// Futex waits and wake-ups on a 32-bit word in memory shared between processes, and Doorbell:
// the one sleep/wake protocol every shared-memory wait uses. Linux only. Private to
// transport/ (the shared-memory link).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace distrl::transport::detail {

static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free (address-free)");

// Sleeps while *word == expected, at most `timeout` (the kernel may return early: callers
// re-check their condition). Shared futex: works across processes on a MAP_SHARED mapping.
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every thread sleeping on word.
void futex_wake_all(std::atomic<std::uint32_t>* word);
// Adds one to an eventfd (non-blocking; a full counter is as good as a wake-up).
void signal_eventfd(int fd);

// One party waits for a condition another process makes true. Lives in shared memory (plain
// atomics, no constructor run in the mapping: zero bytes are its initial state).
// The waiter reads seq, announces itself in `waiters`, re-checks its condition and sleeps on
// seq; the notifier publishes (a release store), then, with a full fence between, bumps seq
// and wakes only when someone waits — so a notify with nobody waiting is one load. Either the
// waiter's re-check sees the publication or the notifier sees the waiter (both sides order
// their store before their load with seq_cst), so no wake-up is lost.
// Untrusted: the peer can write these words. The worst it can do is wake us early or make us
// sleep until our own timeout; every wait has one.
struct Doorbell {
  std::atomic<std::uint32_t> seq;
  std::atomic<std::uint32_t> waiters;

  // Notifier: call after publishing. wake_fd: the waiter's eventfd when it sleeps in poll(2)
  // (an I/O thread watching many rings and sockets) rather than on this futex; -1: the futex.
  void ring(int wake_fd = -1) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (waiters.load(std::memory_order_relaxed) != 0) {
      seq.fetch_add(1, std::memory_order_release);
      if (wake_fd >= 0) signal_eventfd(wake_fd);
      else futex_wake_all(&seq);
    }
  }
};

// How long a waiter spins before it sleeps. Adaptive: a wait that the spin satisfied lets the
// next one spin as long again (up to `max`), one that had to sleep halves the budget; once the
// budget is gone it is tried again (at `max`) every 64th wait, so a peer that became fast is
// noticed. max = 0: never spin (futex only). One per waiting thread; not thread-safe.
class Spinner {
 public:
  explicit Spinner(std::chrono::nanoseconds max = std::chrono::nanoseconds{0}) : max_(max), budget_(max) {}
  std::chrono::nanoseconds max() const { return max_; }
  // The spin for this wait.
  std::chrono::nanoseconds next() {
    if (budget_.count() == 0 && max_.count() > 0 && ++dry_ % 64 == 0) return max_;
    return budget_;
  }
  void spun_ok() { budget_ = max_; }
  void slept() { budget_ = budget_ / 2 < std::chrono::nanoseconds{500} ? std::chrono::nanoseconds{0} : budget_ / 2; }

 private:
  std::chrono::nanoseconds max_, budget_;
  unsigned dry_ = 0;
};

// Waits until ready() is true or the deadline passes: spins for up to spinner.next(), then
// sleeps on bell (futex), waking at most every `slice` to re-check (a peer that scribbled on
// the bell cannot keep us asleep). Returns ready()'s last value.
template <class Ready>
bool wait_on(Doorbell& bell, Spinner& spinner, std::chrono::steady_clock::time_point deadline, Ready&& ready,
             std::chrono::milliseconds slice = std::chrono::milliseconds{50});

void cpu_relax();

template <class Ready>
bool wait_on(Doorbell& bell, Spinner& spinner, std::chrono::steady_clock::time_point deadline, Ready&& ready,
             std::chrono::milliseconds slice) {
  using Clock = std::chrono::steady_clock;
  if (ready()) return true;
  const auto spin = spinner.next();
  if (spin.count() > 0) {
    const auto until = std::min(deadline, Clock::now() + spin);
    for (unsigned i = 1;; ++i) {
      cpu_relax();
      if (ready()) {
        spinner.spun_ok();
        return true;
      }
      if (i % 64 == 0 && Clock::now() >= until) break;
    }
  }
  for (;;) {
    const std::uint32_t s = bell.seq.load(std::memory_order_acquire);
    bell.waiters.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the announcement before the re-check
    bool now_ready = true;
    try {
      now_ready = ready();
    } catch (...) {
      bell.waiters.fetch_sub(1, std::memory_order_relaxed);
      throw;
    }
    const auto now = Clock::now();
    if (!now_ready && now < deadline) futex_wait(&bell.seq, s, std::min<Clock::duration>(deadline - now, slice));
    bell.waiters.fetch_sub(1, std::memory_order_relaxed);
    if (now_ready || ready()) {
      spinner.slept();
      return true;
    }
    if (Clock::now() >= deadline) {
      spinner.slept();
      return false;
    }
  }
}

}  // namespace distrl::transport::detail
