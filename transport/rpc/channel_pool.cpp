#include "transport/rpc/detail/channel_pool.h"

namespace distrl::transport::detail {

void ChannelPool::resize(int world) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.resize(world);
}

ChannelPtr ChannelPool::take(int dest, std::int64_t incarnation, bool* closed) {
  std::vector<ChannelPtr> stale;  // closed after the unlock
  std::lock_guard<std::mutex> lock(mu_);
  *closed = closed_;
  if (closed_ || dest < 0 || dest >= static_cast<int>(idle_.size())) return nullptr;
  auto& idle = idle_[dest];
  while (!idle.empty()) {
    ChannelPtr c = std::move(idle.back());
    idle.pop_back();
    if (c->incarnation == incarnation) return c;
    stale.push_back(std::move(c));  // the rank rejoined since: retire() is on its way
  }
  return nullptr;
}

void ChannelPool::give_back(int dest, ChannelPtr c, std::int64_t incarnation) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_ && c->incarnation == incarnation && dest >= 0 && dest < static_cast<int>(idle_.size()))
    idle_[dest].push_back(std::move(c));
  // else: closed here, under the lock that close() (or retire()) took to close the idle ones
}

void ChannelPool::retire(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!closed_ && peer >= 0 && peer < static_cast<int>(idle_.size())) idle_[peer].clear();
}

void ChannelPool::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  idle_.clear();
}

}  // namespace distrl::transport::detail
