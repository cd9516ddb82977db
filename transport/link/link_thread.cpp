#include "transport/link/link_thread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "common/error.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace distrl::transport::detail {

LinkThread::LinkThread() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw TransportError("transport: eventfd failed");
}

LinkThread::~LinkThread() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool LinkThread::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.load(std::memory_order_relaxed)) return false;
    posted_.push_back(std::move(fn));
  }
  // Only a sleeping thread needs the syscall; a spinning one sees the queue on its next round.
  if (sleeping_.exchange(false)) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  return true;
}

bool LinkThread::run() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) {
    try {
      fn();
    } catch (const std::exception& e) {
      DISTRL_LOG(Error, "transport: I/O task threw " << e.what());
    }
  }
  return !batch.empty();
}

bool send_on_io_thread(Link& link, const Link::Events& events, int peer, Frames& frames, std::string* error,
                       std::function<void()> after, bool queue_behind) {
  if (link.on_io_thread() && !queue_behind) return link.send_to_peer(peer, frames, error);
  auto f = std::make_shared<Frames>(std::move(frames));
  const bool posted = link.post([&link, &events, peer, f, after = std::move(after)] {
    AtExit done{[&] {
      if (after) after();
    }};
    std::string why;
    if (!link.send_to_peer(peer, *f, &why) && events.on_send_failed)
      guarded(events, "reporting a failed send", [&] { events.on_send_failed(peer, std::move(*f), why); });
  });
  if (posted) return true;
  frames = std::move(*f);
  *error = "the link is shutting down";
  return false;
}

bool reply_on_io_thread(Link& link, const Link::Events& events, const Caller& to, Frames& frames,
                        std::function<void()> after, bool queue_behind) {
  if (link.on_io_thread() && !queue_behind) return link.send_reply(to, frames);
  auto f = std::make_shared<Frames>(std::move(frames));
  const bool posted = link.post([&link, &events, to, f, after = std::move(after)] {
    AtExit done{[&] {
      if (after) after();
    }};
    if (!link.send_reply(to, *f) && events.on_send_failed)
      guarded(events, "reporting a failed send",
              [&] { events.on_send_failed(to.rank, std::move(*f), "the caller is gone or not reading"); });
  });
  if (!posted) frames = std::move(*f);
  return posted;
}

void LinkThread::start(std::function<void()> init, std::function<void()> run) {
  thread_ = std::thread([this, init = std::move(init), run = std::move(run)] {
    id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    name_this_thread("distrl-io");
    if (init) init();
    run();
  });
}

bool LinkThread::stop() {
  if (stopped_) return false;
  stopped_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);  // post() sees stopping_ under the same lock
    stopping_.store(true);
  }
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  return true;
}

bool LinkThread::going_to_sleep() {
  sleeping_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  return !posted_.empty() || stopping_.load();
}

void LinkThread::woke(bool wake_fd_fired) {
  sleeping_.store(false);
  if (wake_fd_fired) {
    std::uint64_t v;
    (void)!::read(wake_fd_, &v, sizeof v);
  }
}

}  // namespace distrl::transport::detail
