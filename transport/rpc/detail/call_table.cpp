#include "transport/rpc/detail/call_table.h"

namespace distrl::transport::detail {

void CallTable::begin() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++inflight_;
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
}

void CallTable::end() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--inflight_ == 0) idle_cv_.notify_all();
}

bool CallTable::wait_idle(Clock::time_point until, std::size_t* left) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool idle = idle_cv_.wait_until(lock, until, [&] { return inflight_ == 0; });
  *left = inflight_;
  return idle;
}

bool CallTable::begin_pending(Pending p) {
  bool earliest = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++inflight_;
    earliest = deadlines_.emplace(p.deadline, p.id) == deadlines_.begin();
    const std::uint64_t id = p.id;
    pending_.emplace(id, std::move(p));
  }
  sent_.fetch_add(1, std::memory_order_relaxed);
  return earliest;
}

void CallTable::erase_deadline_locked(const Pending& p) {
  auto range = deadlines_.equal_range(p.deadline);
  for (auto d = range.first; d != range.second; ++d)
    if (d->second == p.id) {
      deadlines_.erase(d);
      return;
    }
}

std::optional<CallTable::Pending> CallTable::take(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  Pending p = std::move(it->second);
  pending_.erase(it);
  erase_deadline_locked(p);
  return p;
}

std::vector<CallTable::Pending> CallTable::take_to(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Pending> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.dest != peer) {
      ++it;
      continue;
    }
    erase_deadline_locked(it->second);
    out.push_back(std::move(it->second));
    it = pending_.erase(it);
  }
  return out;
}

std::vector<CallTable::Pending> CallTable::take_expired(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Pending> out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = pending_.find(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    if (it == pending_.end()) continue;
    out.push_back(std::move(it->second));
    pending_.erase(it);
  }
  return out;
}

std::vector<CallTable::Pending> CallTable::take_all() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Pending> out;
  for (auto& kv : pending_) out.push_back(std::move(kv.second));
  pending_.clear();
  deadlines_.clear();
  return out;
}

CallTable::Clock::time_point CallTable::next_deadline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return deadlines_.empty() ? Clock::time_point::max() : deadlines_.begin()->first;
}

}  // namespace distrl::transport::detail
