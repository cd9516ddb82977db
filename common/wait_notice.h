// Says on stderr what a start-up wait is waiting for, when it lasts: once after 2 s, then every
// 10 s, with the time so far ("distrl-ps trainer 2: waiting for every trainer to pull the
// model, 2 s"), so that a start is never silent for long. Not thread-safe: one per wait, ticked by
// the waiting thread (at least every second).
#pragma once

#include <chrono>
#include <iostream>
#include <string>

namespace distrl {

class WaitNotice {
 public:
  explicit WaitNotice(std::string text) : text_(std::move(text)) {}

  void tick() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return;
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
    std::cerr << text_ << ", " << waited << " s" << std::endl;
    next_ = now + std::chrono::seconds(10);
  }

 private:
  std::string text_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point next_ = start_ + std::chrono::seconds(2);
};

}  // namespace distrl
