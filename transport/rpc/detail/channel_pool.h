// The synchronous fast path's idle channels (docs/threads.md): a link Channel per peer and per
// concurrent synchronous caller, checked out by the calling thread for one call and given
// back after it. A channel belongs to the thread holding it; the pool's one lock covers the idle
// ones and each peer's current incarnation as the pool knows it (set at start and by retire()).
// Each channel remembers the incarnation of the process it connected to, and only a channel of
// the current one is pooled or handed out: once retire() has run for a rejoin, no channel to
// the earlier process is reused, whatever the callers read from the peer table meanwhile.
// Closed at shutdown (a channel in use then is closed when its call gives it back). Channels
// are destroyed outside the lock. Any thread. Private to transport/rpc/.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/link/link.h"

namespace distrl::transport::detail {

struct PooledChannel {
  std::unique_ptr<Channel> channel;
  std::int64_t incarnation = 0;  // of the peer's process when it connected
};
using ChannelPtr = std::unique_ptr<PooledChannel>;

class ChannelPool {
 public:
  // At start: every rank's incarnation (the peer table's).
  void reset(std::vector<std::int64_t> incarnations);
  // An idle channel to dest's current process; nullptr when there is none (the caller opens
  // one) or the pool is closed (*closed then).
  ChannelPtr take(int dest, bool* closed);
  // After a call: kept for the next one while the pool is open and c talks to dest's current
  // process; closed otherwise.
  void give_back(int dest, ChannelPtr c);
  // Rank peer rejoined as `incarnation`: its idle channels are closed, and every channel to an
  // earlier process given back from now on.
  void retire(int peer, std::int64_t incarnation);
  // Shutdown: every idle channel is closed, and every channel given back from now on.
  void close();

 private:
  std::mutex mu_;
  std::vector<std::vector<ChannelPtr>> idle_;  // by peer rank
  std::vector<std::int64_t> current_;          // by peer rank: the incarnation channels must have
  bool closed_ = false;
};

}  // namespace distrl::transport::detail
