// Future<T> / Promise<T>: a one-shot value or error shared between threads.
// Thread-safe. Callbacks registered with then() fire exactly once: inline on the completing
// thread, or on the Executor the completer names (the RPC agent names its handler pool, so
// callbacks on RPC results never run on the socket I/O thread; a future a user completes runs
// them on that user's thread). Callbacks never run under our locks. See docs/threads.md.
// The library's own short continuations (counting when_all's inputs, boxing a handler's
// result, sending an async handler's reply) use then_inline / on_done_inline: they run on the
// completing thread whatever its executor, and pass the executor on to what they complete, so a
// chain of them costs no thread hand-off and a user's then() behind it still runs on the pool.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/error.h"

namespace distrl::transport {

// Somewhere to run work: a thread pool, or inline.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual void post(std::function<void()> fn) = 0;
};

template <typename T>
class Future;
template <typename T>
class Promise;

// How long wait() spins before it blocks: a round trip on a 2-vCPU VM is cheaper when the
// waiter is still on-CPU when the answer lands. Process-wide, default 0 (off): on machines
// with fewer cores than busy threads spinning costs more than it saves.
void set_future_spin(std::chrono::microseconds spin);
std::chrono::microseconds future_spin();

namespace detail {

struct Unit {};

template <typename T>
using Stored = std::conditional_t<std::is_void_v<T>, Unit, T>;

template <typename T>
struct FutureState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  std::optional<Stored<T>> value;
  std::exception_ptr error;
  // fn(executor): the executor the outcome was completed with (nullptr: none, or the callback
  // was posted to it already). run_inline: the library's own short continuations.
  struct Callback {
    std::function<void(Executor*)> fn;
    bool run_inline = false;
  };
  std::vector<Callback> callbacks;

  // Publishes the outcome once; false if it was already set.
  template <typename Fill>
  bool complete(Fill&& fill, Executor* executor) {
    std::vector<Callback> cbs;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done.load(std::memory_order_relaxed)) return false;
      fill();
      done.store(true, std::memory_order_release);
      cbs.swap(callbacks);
    }
    cv.notify_all();
    for (auto& cb : cbs) {
      if (executor && !cb.run_inline) executor->post([fn = std::move(cb.fn)] { fn(nullptr); });
      else cb.fn(executor);
    }
    return true;
  }

  void wait() {
    if (done.load(std::memory_order_acquire)) return;
    auto spin = future_spin();
    if (spin.count() > 0) {
      auto until = std::chrono::steady_clock::now() + spin;
      do {
        for (int i = 0; i < 64; ++i)
          if (done.load(std::memory_order_acquire)) return;
      } while (std::chrono::steady_clock::now() < until);
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done.load(std::memory_order_relaxed); });
  }

  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) {
    if (done.load(std::memory_order_acquire)) return true;
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return done.load(std::memory_order_relaxed); });
  }

  // Runs cb now if done (on this thread, executor nullptr), else when done: on the completer's
  // executor, or inline on the completing thread when run_inline.
  void on_done(std::function<void(Executor*)> cb, bool run_inline) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!done.load(std::memory_order_relaxed)) {
        callbacks.push_back(Callback{std::move(cb), run_inline});
        return;
      }
    }
    cb(nullptr);
  }
};

// Breaks the promise (sets an error) when the last Promise copy goes away unset.
template <typename T>
struct PromiseGuard {
  std::shared_ptr<FutureState<T>> state = std::make_shared<FutureState<T>>();
  ~PromiseGuard() {
    state->complete([&] { state->error = std::make_exception_ptr(Error("broken promise: it was dropped unset")); },
                    nullptr);
  }
};

template <typename T>
struct ValueRef {
  using type = const T&;
};
template <>
struct ValueRef<void> {
  using type = void;
};

}  // namespace detail

template <typename T>
class Future {
 public:
  using value_type = T;
  using ValueRef = typename detail::ValueRef<T>::type;

  Future() = default;
  bool valid() const { return state_ != nullptr; }
  bool done() const { return state_->done.load(std::memory_order_acquire); }
  void wait() const { state_->wait(); }
  // True when the future completed within the timeout.
  template <typename Rep, typename Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return state_->wait_for(timeout);
  }
  // Waits; returns the value or rethrows the error.
  ValueRef value() const {
    wait();
    if (state_->error) std::rethrow_exception(state_->error);
    if constexpr (!std::is_void_v<T>) return *state_->value;
  }
  // Waits; the error or nullptr.
  std::exception_ptr error() const {
    wait();
    return state_->error;
  }
  bool has_error() const { return done() && state_->error != nullptr; }

  // f(Future<T>) -> U runs when this future completes; its result or exception completes the
  // returned Future<U>. Like torch.futures.Future.then.
  template <typename F>
  auto then(F&& f) const -> Future<std::invoke_result_t<F, Future<T>>> {
    return chain(std::forward<F>(f), false);
  }
  // then(), run on the completing thread whatever executor completed this future (the I/O
  // thread, for an RPC result), the returned future completed with that same executor. For the
  // library's own continuations only: f must be short, never block and never run user code.
  template <typename F>
  auto then_inline(F&& f) const -> Future<std::invoke_result_t<F, Future<T>>> {
    return chain(std::forward<F>(f), true);
  }
  // The bare form: fn(executor) on the completing thread once this future completes (now, with
  // nullptr, if it has); what fn completes should name `executor`. The same rules as then_inline.
  void on_done_inline(std::function<void(Executor*)> fn) const { state_->on_done(std::move(fn), true); }

  // A future that is already complete.
  template <typename V = T, typename = std::enable_if_t<!std::is_void_v<V>>>
  static Future ready(V v) {
    Promise<T> p;
    p.set_value(std::move(v));
    return p.get_future();
  }
  template <typename V = T, typename = std::enable_if_t<std::is_void_v<V>>, typename = void>
  static Future ready() {
    Promise<T> p;
    p.set_value();
    return p.get_future();
  }
  static Future failed(std::exception_ptr e) {
    Promise<T> p;
    p.set_error(std::move(e));
    return p.get_future();
  }

 private:
  friend class Promise<T>;
  explicit Future(std::shared_ptr<detail::FutureState<T>> s) : state_(std::move(s)) {}
  template <typename F>
  auto chain(F&& f, bool run_inline) const -> Future<std::invoke_result_t<F, Future<T>>> {
    using U = std::invoke_result_t<F, Future<T>>;
    Promise<U> p;
    Future<U> out = p.get_future();
    Future<T> self = *this;
    state_->on_done(
        [p, self, f = std::forward<F>(f)](Executor* executor) mutable {
          try {
            if constexpr (std::is_void_v<U>) {
              f(self);
              p.set_value(executor);
            } else {
              p.set_value(f(self), executor);
            }
          } catch (...) {
            p.set_error(std::current_exception(), executor);
          }
        },
        run_inline);
    return out;
  }
  std::shared_ptr<detail::FutureState<T>> state_;
};

// The writing side. Copyable (copies share one outcome), so it fits in std::function.
// The first set_* wins and returns true; later ones return false.
template <typename T>
class Promise {
 public:
  Promise() : guard_(std::make_shared<detail::PromiseGuard<T>>()) {}
  Future<T> get_future() const { return Future<T>(guard_->state); }

  template <typename V = T, typename = std::enable_if_t<!std::is_void_v<V>>>
  bool set_value(V v, Executor* executor = nullptr) const {
    auto& s = *guard_->state;
    return s.complete([&] { s.value.emplace(std::move(v)); }, executor);
  }
  template <typename V = T, typename = std::enable_if_t<std::is_void_v<V>>>
  bool set_value(Executor* executor = nullptr) const {
    auto& s = *guard_->state;
    return s.complete([&] { s.value.emplace(); }, executor);
  }
  bool set_error(std::exception_ptr e, Executor* executor = nullptr) const {
    auto& s = *guard_->state;
    return s.complete([&] { s.error = std::move(e); }, executor);
  }
  bool done() const { return guard_->state->done.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<detail::PromiseGuard<T>> guard_;
};

// Completes when every input has; fails with the first error (in input order) if any failed.
template <typename T>
auto when_all(std::vector<Future<T>> futures)
    -> Future<std::conditional_t<std::is_void_v<T>, void, std::vector<detail::Stored<T>>>> {
  using Out = std::conditional_t<std::is_void_v<T>, void, std::vector<detail::Stored<T>>>;
  Promise<Out> p;
  auto out = p.get_future();
  if (futures.empty()) {
    if constexpr (std::is_void_v<T>) p.set_value();
    else p.set_value(Out{});
    return out;
  }
  auto remaining = std::make_shared<std::atomic<size_t>>(futures.size());
  auto all = std::make_shared<std::vector<Future<T>>>(futures);
  for (auto& f : futures) {
    f.on_done_inline([p, remaining, all](Executor* executor) {
      if (remaining->fetch_sub(1) != 1) return;
      for (auto& g : *all)
        if (g.error()) {
          p.set_error(g.error(), executor);
          return;
        }
      if constexpr (std::is_void_v<T>) {
        p.set_value(executor);
      } else {
        try {  // copying a value may throw (bad_alloc): the outcome is that error, never lost
          Out values;
          values.reserve(all->size());
          for (auto& g : *all) values.push_back(g.value());
          p.set_value(std::move(values), executor);
        } catch (...) {
          p.set_error(std::current_exception(), executor);
        }
      }
    });
  }
  return out;
}

}  // namespace distrl::transport
