// What every link's I/O thread shares (ZeroMQ's IoLoop and the shared-memory ShmLink): the
// tasks other threads post to it, an eventfd that wakes it only while it sleeps, and the
// boundary its callbacks run inside. Private to transport/.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "transport/detail/link.h"

namespace distrl::transport::detail {

// Tasks for the I/O thread. post() and stop() from any thread; the rest on the I/O thread.
class PostedTasks {
 public:
  PostedTasks();  // TransportError when no eventfd can be made
  ~PostedTasks();
  PostedTasks(const PostedTasks&) = delete;
  PostedTasks& operator=(const PostedTasks&) = delete;

  // The descriptor to poll: readable after a post() or stop() while the thread slept.
  int wake_fd() const { return wake_fd_; }
  // Queues fn; writes the eventfd only when the I/O thread said it sleeps. False (fn dropped)
  // once stop() has begun.
  bool post(std::function<void()> fn);
  // Runs every queued task (one that throws is logged); true when there was any.
  bool run();
  // Refuses further posts and wakes the thread.
  void stop();
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

// on_dropped(what), guarded.
inline void report_dropped(const Link::Events& events, const std::string& what) {
  guarded(events, "reporting a refused message", [&] {
    if (events.on_dropped) events.on_dropped(what);
  });
}

}  // namespace distrl::transport::detail
