// A small key-value store for rendezvous, like torch's TCPStore: rank 0 hosts a StoreServer,
// every process talks to it through a Store client. Values are bytes; add() keeps counters.
// Every call has a timeout and raises TimeoutError naming the store and the keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace distrl::transport {

// What one store may hold; a request past a bound is answered with an error naming it (the
// caller's Store call throws TransportError), never by growing.
struct StoreLimits {
  std::size_t max_keys = 1 << 20;
  std::size_t max_bytes = std::size_t{64} << 20;  // keys + values, all together
  std::size_t max_value_bytes = std::size_t{1} << 20;
  std::size_t max_waiters = 1 << 16;  // get/wait requests parked at once

  // "keys=N,mb=N,value_mb=N,waiters=N" (any subset; the rest keep their defaults). Throws
  // ConfigError naming the bad item.
  static StoreLimits parse(const std::string& text);
  // The environment's DISTRL_STORE_LIMITS (that syntax; distrl-launch --store-limits sets it),
  // else the defaults. The stores the rendezvous and distrl-launch host use it.
  static StoreLimits from_env();
};

// The key by which rank `rank` is known gone (its process died): the RPC agents' graceful
// shutdown does not wait for it. Set by a worker that saw the rank's connection drop, or by
// distrl-launch for a rank of the run that exited with an error and was not stopped.
inline std::string dead_rank_key(int rank) { return "rpc/dead/" + std::to_string(rank); }
// Where an RPC agent publishes its address when it joins the world (the rendezvous): a rank
// with this key set has joined.
inline constexpr const char* kWorkerAddressPrefix = "rpc/worker/";
inline std::string joined_rank_key(int rank) { return kWorkerAddressPrefix + std::to_string(rank); }

// Serves the store on its own thread until destroyed. Thread-safe. A malformed or impossible
// request (bad frames, add() on a non-number, a bound passed) is answered with an error and
// logged at most once a second; it never stops the server.
class StoreServer {
 public:
  // endpoint: a ZeroMQ endpoint to bind, e.g. "tcp://0.0.0.0:29500" or "tcp://127.0.0.1:*".
  explicit StoreServer(const std::string& endpoint, StoreLimits limits = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  // The bound endpoint with the real port.
  std::string endpoint() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A client. Thread-safe (calls are serialised).
class Store {
 public:
  Store(const std::string& endpoint, std::chrono::milliseconds timeout);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Every call without a timeout argument is bounded by the client's timeout(); one with a
  // timeout by that instead (a caller with a deadline of its own, e.g. a shutdown, passes the rest).
  void set(const std::string& key, const std::string& value);
  void set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout);
  // Waits until key exists, then returns its value.
  std::string get(const std::string& key);
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds delta to the counter at key (created at 0) and returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // True when every key exists (does not wait).
  bool check(const std::vector<std::string>& keys);
  bool check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // True when the server answers within timeout; throws TransportError when it refused this
  // process's handshake (another security setting or key: a wrong world, not a missing one).
  bool ping(std::chrono::milliseconds timeout);
  const std::string& endpoint() const;
  std::chrono::milliseconds timeout() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace distrl::transport
