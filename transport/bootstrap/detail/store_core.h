// The rendezvous store's protocol and its socket-free state machine: StoreServer moves bytes
// between its ROUTER and a StoreCore; the fuzz target (tests/fuzz/fuzz_store.cpp) feeds one
// directly. Private to transport/.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/log.h"
#include "transport/bootstrap/store.h"

namespace distrl::transport::detail {

using StoreClock = std::chrono::steady_clock;

// Request: [op, request id, [keys...], value, delta, timeout ms]. Reply: [request id, status, value, number].
enum StoreOp : int { kStoreSet = 0, kStoreGet = 1, kStoreAdd = 2, kStoreWait = 3, kStoreCheck = 4, kStorePing = 5 };
enum StoreStatus : int { kStoreOk = 0, kStoreTimedOut = 1, kStoreBad = 2 };

struct StoreRequest {
  int op = -1;
  std::uint64_t id = 0;
  std::vector<std::string> keys;
  std::string value;
  std::int64_t delta = 0;
  std::int64_t timeout_ms = 0;
  MSGPACK_DEFINE(op, id, keys, value, delta, timeout_ms);
};
struct StoreReply {
  std::uint64_t id = 0;
  int status = kStoreOk;
  std::string value;
  std::int64_t number = 0;
  MSGPACK_DEFINE(id, status, value, number);
};

// Packed bytes of a request or reply. Decoding is bounded (at most 1024 keys, strings and
// binaries of 1 MiB, nesting 8 deep) and returns false for anything that is not one.
std::string pack_store_message(const StoreRequest& q);
std::string pack_store_message(const StoreReply& r);
bool unpack_store_message(const char* data, std::size_t size, StoreRequest* out);
bool unpack_store_message(const char* data, std::size_t size, StoreReply* out);

// The store's keys, counters and parked waits. Not thread-safe: one thread (the server's)
// calls every member. Replies go out through `send`, called on that thread, synchronously.
class StoreCore {
 public:
  using Send = std::function<void(const std::string& peer, std::string&& reply)>;
  StoreCore(StoreLimits limits, Send send) : limits_(limits), send_(std::move(send)) {}

  // One received request (the bytes after the routing frame). Anything malformed or impossible
  // is answered with an error when it carries a request id, dropped and counted when not; a
  // request never throws out of here and never grows the store past its limits.
  void on_request(const std::string& peer, const char* data, std::size_t size);
  // Answers waits whose deadline passed with kStoreTimedOut.
  void expire(StoreClock::time_point now);
  // How long the server may sleep before the next expire() is due (at most `cap`).
  std::chrono::milliseconds next_timeout(StoreClock::time_point now, std::chrono::milliseconds cap) const;

  // Counts a refused or malformed request and logs it (at most one line a second).
  void warn(const std::string& what);

  std::uint64_t refused() const { return refused_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t keys() const { return data_.size(); }
  std::size_t waiting() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::string peer;
    StoreRequest req;
    StoreClock::time_point deadline;
  };
  void handle(const std::string& peer, const StoreRequest& q);
  void store_value(const std::string& key, std::string value);
  bool has_all(const std::vector<std::string>& keys) const;
  bool try_answer(const std::string& peer, const StoreRequest& q);
  void answer_waiters();
  void reply(const std::string& peer, const StoreReply& r) { send_(peer, pack_store_message(r)); }

  StoreLimits limits_;
  Send send_;
  std::map<std::string, std::string> data_;
  std::size_t bytes_ = 0;  // keys + values in data_
  std::vector<Waiter> waiters_;
  RateLimiter log_limit_{std::chrono::milliseconds(1000)};
  std::uint64_t refused_ = 0;
};

}  // namespace distrl::transport::detail
