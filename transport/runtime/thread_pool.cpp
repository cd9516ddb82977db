#include "transport/runtime/thread_pool.h"

#include <exception>

#include "common/log.h"
#include "common/thread_name.h"

namespace distrl::transport {

namespace {
std::atomic<long long> g_spin_us{0};
}

void set_future_spin(std::chrono::microseconds spin) { g_spin_us.store(spin.count()); }
std::chrono::microseconds future_spin() { return std::chrono::microseconds(g_spin_us.load(std::memory_order_relaxed)); }

ThreadPool::ThreadPool(int threads, std::string name, std::function<void()> init) : name_(std::move(name)) {
  if (threads < 1) threads = 1;
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i)
    workers_.emplace_back([this, init] {
      name_this_thread(name_.empty() ? "distrl-pool" : name_);
      if (init) init();
      run();
    });
}

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::post(std::function<void()> fn) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      DISTRL_LOG(Warn, name_ << ": task posted after stop, dropped");
      return;
    }
    queue_.push_back(std::move(fn));
    wake = idle_ > 0;
  }
  if (wake) cv_.notify_one();
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) {
    if (!w.joinable()) continue;
    if (w.get_id() == std::this_thread::get_id()) w.detach();  // stop() from one of our own tasks
    else w.join();
  }
  workers_.clear();
}

void ThreadPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      DISTRL_LOG(Error, name_ << ": task threw " << e.what());
    } catch (...) {
      DISTRL_LOG(Error, name_ << ": task threw a non-std exception");
    }
  }
}

}  // namespace distrl::transport
