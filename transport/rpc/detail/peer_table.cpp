#include "transport/rpc/detail/peer_table.h"

namespace distrl::transport::detail {

void PeerTable::reset(std::vector<std::string> endpoints, std::vector<std::int64_t> incarnations) {
  std::lock_guard<std::mutex> lock(mu_);
  drops_.assign(endpoints.size(), 0);
  endpoints_ = std::move(endpoints);
  incarnations_ = std::move(incarnations);
  down_.clear();
}

std::string PeerTable::endpoint(int peer, std::int64_t* incarnation) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (incarnation) *incarnation = in_range(peer) ? incarnations_[peer] : 0;
  return in_range(peer) ? endpoints_[peer] : std::string();
}

std::int64_t PeerTable::incarnation(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_range(peer) ? incarnations_[peer] : 0;
}

std::uint64_t PeerTable::drops(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_range(peer) ? drops_[peer] : 0;
}

void PeerTable::down(int peer, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  down_.emplace(peer, why);
  if (in_range(peer)) ++drops_[peer];
}

std::string PeerTable::up(int peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = down_.find(peer);
  if (it == down_.end()) return {};
  std::string why = std::move(it->second);
  down_.erase(it);
  return why;
}

std::string PeerTable::down_reason(int peer, std::int64_t* incarnation) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (incarnation) *incarnation = in_range(peer) ? incarnations_[peer] : 0;
  auto it = down_.find(peer);
  return it == down_.end() ? std::string() : it->second;
}

bool PeerTable::is_down(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_.count(peer) > 0;
}

std::vector<int> PeerTable::down_peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& kv : down_) out.push_back(kv.first);
  return out;
}

void PeerTable::rejoined(int peer, std::int64_t incarnation, const std::string& endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_range(peer)) return;
  incarnations_[peer] = incarnation;
  endpoints_[peer] = endpoint;
}

}  // namespace distrl::transport::detail
