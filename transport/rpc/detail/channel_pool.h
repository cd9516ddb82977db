// The synchronous fast path's idle channels (docs/threads.md): a link Channel per peer and per
// concurrent synchronous caller, checked out by the calling thread for one call and given
// back after it. A channel belongs to the thread holding it; the pool's one lock covers only
// the idle ones. Each channel remembers the incarnation of the process it connected to: after
// the rank rejoins, an older channel is closed instead of reused. Closed at shutdown (a channel
// in use then is closed when its call gives it back). Any thread. Private to transport/rpc/.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/detail/link.h"

namespace distrl::transport::detail {

struct PooledChannel {
  std::unique_ptr<Channel> channel;
  std::int64_t incarnation = 0;  // of the peer's process when it connected
};
using ChannelPtr = std::unique_ptr<PooledChannel>;

class ChannelPool {
 public:
  void resize(int world);
  // An idle channel to dest connected to its process of `incarnation`; nullptr when there is
  // none (the caller opens one) or the pool is closed (*closed then).
  ChannelPtr take(int dest, std::int64_t incarnation, bool* closed);
  // After a call: kept for the next one while the pool is open and c still talks to dest's
  // process of `incarnation`; closed otherwise.
  void give_back(int dest, ChannelPtr c, std::int64_t incarnation);
  // Rank peer rejoined: its idle channels are closed.
  void retire(int peer);
  // Shutdown: every idle channel is closed, and every channel given back from now on.
  void close();

 private:
  std::mutex mu_;
  std::vector<std::vector<ChannelPtr>> idle_;  // by peer rank
  bool closed_ = false;
};

}  // namespace distrl::transport::detail
