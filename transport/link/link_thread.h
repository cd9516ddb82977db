// What every link's I/O thread shares (ZeroMQ's IoLoop and the shared-memory ShmLink): the
// thread itself (started, stopped, named), the tasks other threads post to it, an eventfd that
// wakes it only while it sleeps, and the boundary its callbacks run inside. Private to transport/.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/link/link.h"

namespace distrl::transport::detail {

// A link's I/O thread ("distrl-io") and the tasks posted to it. start(), stop(), post() and
// on_thread() from any thread; the rest on the I/O thread. stop() before destruction.
class LinkThread {
 public:
  LinkThread();  // TransportError when no eventfd can be made
  ~LinkThread();
  LinkThread(const LinkThread&) = delete;
  LinkThread& operator=(const LinkThread&) = delete;

  // Starts the thread: names it, runs init (when set), then run.
  void start(std::function<void()> init, std::function<void()> run);
  // Refuses further posts, wakes the thread and joins it (run returns once stopping() is
  // true). True the first time, false when already stopped.
  bool stop();
  // Any thread, from any time (a thread woken by the I/O thread may ask before start() returned).
  bool on_thread() const { return std::this_thread::get_id() == id_.load(std::memory_order_relaxed); }

  // The descriptor to poll: readable after a post() or stop() while the thread slept.
  int wake_fd() const { return wake_fd_; }
  // Queues fn; writes the eventfd only when the I/O thread said it sleeps. False (fn dropped)
  // once stop() has begun.
  bool post(std::function<void()> fn);
  // Runs every queued task (one that throws is logged); true when there was any.
  bool run();
  bool stopping() const { return stopping_.load(); }
  // The I/O thread is about to sleep: true when it must not (a task waits, or stop began).
  // Posts from here on write the eventfd.
  bool going_to_sleep();
  // Awake again (after poll returned): drains the eventfd when it fired.
  void woke(bool wake_fd_fired);

 private:
  int wake_fd_ = -1;
  std::mutex mu_;
  std::vector<std::function<void()>> posted_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;
  std::thread thread_;
  std::atomic<std::thread::id> id_{};  // the I/O thread's, written by itself first
};

// Runs a link callback at the I/O thread's boundary: whatever it throws is reported through
// events.on_dropped ("<what> failed: ..."), never ends the thread (which would take every
// pending call of the process with it).
template <typename F>
void guarded(const Link::Events& events, const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    if (events.on_dropped) events.on_dropped(std::string(what) + " failed: " + e.what());
  } catch (...) {
    if (events.on_dropped) events.on_dropped(std::string(what) + " failed with a non-standard exception");
  }
}

// send_any_thread's hand-off, for a link whose sends all run on its I/O thread: send_to_peer
// there (at once when called on it, unless `queue_behind`: then posted too, behind what waits),
// a failure after the hand-off reported through events.on_send_failed, then `after` (when set,
// also when the send threw) on the I/O thread. `after` does not run when nothing was handed off
// (sent at once, or false).
bool send_on_io_thread(Link& link, const Link::Events& events, int peer, Frames& frames, std::string* error,
                       std::function<void()> after = {}, bool queue_behind = false);

// Runs fn when it goes out of scope (however the scope is left).
template <typename F>
struct AtExit {
  F fn;
  ~AtExit() { fn(); }
};
template <typename F>
AtExit(F) -> AtExit<F>;

// send_reply_any_thread's hand-off: send_reply on the I/O thread, a refusal after the hand-off
// reported through events.on_send_failed; `after` and `queue_behind` as send_on_io_thread's.
bool reply_on_io_thread(Link& link, const Link::Events& events, const Caller& to, Frames& frames,
                        std::function<void()> after = {}, bool queue_behind = false);

// on_dropped(what), guarded.
inline void report_dropped(const Link::Events& events, const std::string& what) {
  guarded(events, "reporting a refused message", [&] {
    if (events.on_dropped) events.on_dropped(what);
  });
}

}  // namespace distrl::transport::detail
