// The peers as this worker knows them: where each listens (it changes when a rank rejoins),
// the incarnation of the process there, whether its connection is down and why, and how often
// it dropped. The I/O loop writes it (connections lost and back, rejoin notices); any thread
// reads it (the fast path, shutdown, RpcAgent::connection_lost). One lock. Private to
// transport/rpc/.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace distrl::transport::detail {

class PeerTable {
 public:
  // At start, before any traffic: every rank's endpoint and incarnation.
  void reset(std::vector<std::string> endpoints, std::vector<std::int64_t> incarnations);

  // Where peer listens; *incarnation (when given) gets the incarnation of the process there,
  // read together with it.
  std::string endpoint(int peer, std::int64_t* incarnation = nullptr) const;
  std::int64_t incarnation(int peer) const;  // 0 for a rank out of range
  std::uint64_t drops(int peer) const;       // times its connection was reported lost

  // The connection to peer dropped: records why (the first reason stands until it is back)
  // and counts the drop.
  void down(int peer, const std::string& why);
  // Its connection came back: returns the reason it was down (empty: it was not).
  std::string up(int peer);
  // Empty while it is up; *incarnation (when given) gets the incarnation known, read together
  // with it (the fast path's one look per wait).
  std::string down_reason(int peer, std::int64_t* incarnation = nullptr) const;
  bool is_down(int peer) const;
  std::vector<int> down_peers() const;

  // Rank peer restarted (a newer incarnation than the one known) and listens at endpoint now.
  // A synchronous call or channel tied to the earlier incarnation is retired by its holder.
  void rejoined(int peer, std::int64_t incarnation, const std::string& endpoint);

 private:
  bool in_range(int peer) const { return peer >= 0 && peer < static_cast<int>(endpoints_.size()); }

  mutable std::mutex mu_;
  std::vector<std::string> endpoints_;
  std::vector<std::int64_t> incarnations_;  // the latest heard of each rank
  std::vector<std::uint64_t> drops_;
  std::map<int, std::string> down_;  // rank -> why its connection was lost
};

}  // namespace distrl::transport::detail
