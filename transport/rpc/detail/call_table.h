// This worker's outgoing calls: call ids, the calls sent through the I/O loop and waiting for
// their answer (pending, by id, with deadlines), and how many calls of either path are in
// flight (shutdown waits for none). One lock; any thread. Entries leave the table before their
// completion runs: the caller runs it, outside the lock. Private to transport/rpc/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/rpc/detail/call_types.h"
#include "transport/wire/detail/message.h"

namespace distrl::transport::detail {

class CallTable {
 public:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::uint64_t id = 0;
    int dest = -1;
    std::string fn;
    Completion done;
    Clock::time_point deadline;
    std::chrono::milliseconds timeout{0};
  };

  std::uint64_t next_id() { return next_id_.fetch_add(1); }

  // A call is in flight (either path) from begin() until end(); begin counts it as sent.
  void begin();
  void end();
  // Until no call is in flight or `until`; false at the deadline, *left: calls still in flight.
  bool wait_idle(Clock::time_point until, std::size_t* left);
  std::uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }

  // begin(), and the call (about to be sent through the link) waits for its answer until
  // p.deadline: one lock. True when its deadline is now the earliest.
  bool begin_pending(Pending p);
  // The pending call id, taken out of the table (nullopt: it timed out earlier, or a stray reply).
  std::optional<Pending> take(std::uint64_t id);
  // Every pending call to peer, taken out (its connection dropped).
  std::vector<Pending> take_to(int peer);
  // The pending calls whose deadline is not after now, taken out.
  std::vector<Pending> take_expired(Clock::time_point now);
  // Every pending call (shutdown).
  std::vector<Pending> take_all();
  // The earliest deadline of a pending call (time_point::max() when none).
  Clock::time_point next_deadline() const;

 private:
  void erase_deadline_locked(const Pending& p);

  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::uint64_t> sent_{0};
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::size_t inflight_ = 0;  // calls sent and not completed, for shutdown
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::multimap<Clock::time_point, std::uint64_t> deadlines_;
};

}  // namespace distrl::transport::detail
