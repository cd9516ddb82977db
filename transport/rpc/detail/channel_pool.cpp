#include "transport/rpc/detail/channel_pool.h"

#include <algorithm>

namespace distrl::transport::detail {

void ChannelPool::reset(std::vector<std::int64_t> incarnations) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.clear();
  idle_.resize(incarnations.size());
  current_ = std::move(incarnations);
}

ChannelPtr ChannelPool::take(int dest, bool* closed) {
  std::vector<ChannelPtr> stale;  // closed after the unlock
  std::lock_guard<std::mutex> lock(mu_);
  *closed = closed_;
  if (closed_ || dest < 0 || dest >= static_cast<int>(idle_.size())) return nullptr;
  auto& idle = idle_[dest];
  while (!idle.empty()) {
    ChannelPtr c = std::move(idle.back());
    idle.pop_back();
    if (c->incarnation == current_[dest]) return c;
    stale.push_back(std::move(c));  // not expected: retire() cleared them and give_back() refuses them
  }
  return nullptr;
}

void ChannelPool::give_back(int dest, ChannelPtr c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_ && dest >= 0 && dest < static_cast<int>(idle_.size()) && c->incarnation == current_[dest])
    idle_[dest].push_back(std::move(c));
  // else: c is destroyed (closed) on return, after the unlock
}

void ChannelPool::retire(int peer, std::int64_t incarnation) {
  std::vector<ChannelPtr> stale;  // closed after the unlock
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || peer < 0 || peer >= static_cast<int>(idle_.size())) return;
  current_[peer] = std::max(current_[peer], incarnation);
  stale.swap(idle_[peer]);
}

void ChannelPool::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  idle_.clear();
}

}  // namespace distrl::transport::detail
