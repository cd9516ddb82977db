// A fixed pool of worker threads running posted tasks in FIFO order. Thread-safe.
// Tasks must not throw (an escaping exception is logged and dropped). The destructor runs
// every task already posted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/runtime/future.h"

namespace distrl::transport {

class ThreadPool : public Executor {
 public:
  // init, when set, runs first on each worker thread.
  explicit ThreadPool(int threads, std::string name = "pool", std::function<void()> init = {});
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void post(std::function<void()> fn) override;
  // Stops accepting work, drains the queue, joins the workers. Idempotent.
  void stop();
  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void run();
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  int idle_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace distrl::transport
