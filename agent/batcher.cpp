#include "agent/batcher.h"

#include <cstring>

#include "common/error.h"
#include "common/thread_name.h"

namespace distrl::agent {

using Clock = std::chrono::steady_clock;

Batcher::Batcher(int obs_dim, int num_observers, BatchOptions options, Forward forward)
    : obs_dim_(obs_dim), options_(options), forward_(std::move(forward)) {
  if (obs_dim < 1 || num_observers < 1 || options.max_batch < 1 || options.max_wait.count() < 0)
    throw Error("Batcher: obs_dim, num_observers and max_batch must be positive and max_wait not negative");
  active_.assign(num_observers, 0);
  playing_.assign(num_observers, 0);
  waiting_.assign(num_observers, 0);
  asked_.assign(num_observers, 0);
  timer_ = std::thread([this] {
    name_this_thread("distrl-batch");
    timer_loop();
  });
}

Batcher::~Batcher() { stop(); }

void Batcher::stop() {
  Batch left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    left = std::move(open_);
    open_ = Batch{};
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  for (auto& r : left.requests)
    r.promise.set_error(std::make_exception_ptr(TransportError("the agent is shutting down; action request dropped")));
}

bool Batcher::should_close_locked() const {
  if (open_.requests.empty()) return false;
  return open_.rows >= options_.max_batch || open_.active_asked >= active_count_;
}

Batcher::Batch Batcher::take_locked(Reason why) {
  const auto now = Clock::now();
  for (const auto& r : open_.requests)
    stats_.queue_us += std::chrono::duration<double, std::micro>(now - r.arrived).count();
  Batch b = std::move(open_);
  open_ = std::move(spare_);
  open_.obs.clear();
  open_.requests.clear();
  open_.rows = 0;
  open_.active_asked = 0;
  spare_ = Batch{};
  std::fill(asked_.begin(), asked_.end(), 0);
  ++stats_.batches;
  stats_.rows += b.rows;
  switch (why) {
    case Reason::AllAsked: ++stats_.closed_all_asked; break;
    case Reason::Full: ++stats_.closed_full; break;
    case Reason::Timeout: ++stats_.closed_timeout; break;
    case Reason::Inactive: ++stats_.closed_inactive; break;
    case Reason::Read: ++stats_.closed_read; break;
  }
  return b;
}

transport::Future<rl::ActReply> Batcher::submit(int observer, std::vector<float> obs) {
  if (observer < 0 || observer >= static_cast<int>(active_.size()))
    throw Error("act: observer id " + std::to_string(observer) + " is out of range [0, " +
                std::to_string(active_.size()) + ")");
  const int rows = rl::observation_rows(obs, obs_dim_, options_.max_request_rows);
  transport::Promise<rl::ActReply> p;
  auto f = p.get_future();
  Batch ready;
  bool close = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) throw TransportError("the agent is shutting down; action request refused");
    const bool opens = open_.requests.empty();
    const auto now = Clock::now();
    if (opens) open_.first = now;
    open_.obs.insert(open_.obs.end(), obs.begin(), obs.end());
    open_.requests.push_back(Pending{rows, std::move(p), now});
    open_.rows += rows;
    if (active_[observer] && !asked_[observer]) {
      asked_[observer] = 1;
      ++open_.active_asked;
    }
    ++stats_.requests;
    if (should_close_locked()) {
      ready = take_locked(open_.rows >= options_.max_batch ? Reason::Full : Reason::AllAsked);
      close = true;
    } else if (opens && timer_idle_) {
      // Wake the timer only from its untimed sleep: a timer already sleeping until an older
      // batch's deadline wakes before this one's anyway. No wake-up per batch.
      timer_idle_ = false;
      cv_.notify_all();
    }
  }
  if (close) run(ready);
  return f;
}

void Batcher::set_active(int observer, bool active) { update(observer, &playing_, active); }

void Batcher::set_waiting(int observer, bool waiting) { update(observer, &waiting_, waiting); }

void Batcher::update(int observer, std::vector<std::uint8_t>* flags, bool value) {
  Batch ready;
  bool close = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (observer < 0 || observer >= static_cast<int>(active_.size())) return;
    (*flags)[observer] = value;
    const bool active = playing_[observer] && !waiting_[observer];
    if (static_cast<bool>(active_[observer]) == active) return;
    active_[observer] = active;
    active_count_ += active ? 1 : -1;
    if (active && asked_[observer]) ++open_.active_asked;
    if (!active && asked_[observer]) --open_.active_asked;
    if (!active && should_close_locked()) {
      ready = take_locked(Reason::Inactive);
      close = true;
    }
  }
  if (close) run(ready);
}

int Batcher::active_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_count_;
}

BatchStats Batcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Batcher::flush() {
  if (options_.close != BatchOptions::Close::WhenRead) return;
  Batch ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_.requests.empty()) return;
    ready = take_locked(Reason::Read);
  }
  run(ready);
}

void Batcher::run(Batch& batch) {
  rl::ActReply all;
  const auto t0 = Clock::now();
  try {
    all = forward_(batch.obs.data(), batch.rows);
    all.check(batch.rows);
  } catch (...) {
    auto err = std::current_exception();
    for (auto& r : batch.requests) r.promise.set_error(err);
    recycle(std::move(batch), 0);
    return;
  }
  const double forward_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (batch.requests.size() == 1) {
    batch.requests.front().promise.set_value(std::move(all));  // the whole answer: no copy
  } else {
    std::size_t at = 0;
    for (auto& r : batch.requests) {
      r.promise.set_value(all.slice(static_cast<int>(at), r.rows));
      at += r.rows;
    }
  }
  recycle(std::move(batch), forward_us);
}

void Batcher::recycle(Batch&& batch, double forward_us) {
  const auto requests = static_cast<double>(batch.requests.size());
  batch.requests.clear();  // the promises are done with
  std::lock_guard<std::mutex> lock(mu_);
  stats_.forward_us += forward_us;
  stats_.forward_wait_us += forward_us * requests;
  if (spare_.obs.capacity() < batch.obs.capacity()) spare_ = std::move(batch);
}

void Batcher::timer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    if (open_.requests.empty()) {
      timer_idle_ = true;
      cv_.wait(lock);
      continue;
    }
    const auto deadline = open_.first + options_.max_wait;
    if (Clock::now() < deadline) {
      cv_.wait_until(lock, deadline);
      continue;
    }
    Batch ready = take_locked(Reason::Timeout);
    lock.unlock();
    run(ready);
    lock.lock();
  }
}

}  // namespace distrl::agent
