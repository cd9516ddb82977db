// Plain option and info structs of the RPC layer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>
#include <utility>

#include <msgpack.hpp>

#include "transport/wire/wire_limits.h"

namespace distrl::transport {

// The transports a config names (rpc.transport, dist.transport) and what they mean, one text
// for every tool's --help.
inline const std::vector<std::string>& transport_choices() {
  static const std::vector<std::string> c{"auto", "shm", "zmq", "tcp", "ipc"};
  return c;
}
constexpr const char* kTransportHelp =
    "auto: per pair of processes, shared memory between those on one host, ZeroMQ between hosts (process groups: "
    "shared memory only when the whole world is on one host); shm; zmq (ipc on one host, tcp between hosts); tcp; "
    "ipc (ZeroMQ over that only). DISTRL_TRANSPORT overrides auto";

struct RpcOptions {
  std::string name;                                      // worker name; default "worker<rank>"
  std::string init_method = "env://";                    // env://, tcp://host:port, file:///path
  int rank = -1;                                         // -1: from the environment (RANK, SLURM_PROCID, OMPI_...)
  int world_size = -1;                                   // -1: from the environment
  std::chrono::milliseconds rpc_timeout{60000};          // default per-call timeout
  std::chrono::milliseconds rendezvous_timeout{120000};  // finding every peer at start
  std::chrono::milliseconds shutdown_timeout{60000};     // all of a graceful shutdown (calls, barriers)
  int num_worker_threads = 4;                            // handler pool
  // auto: chosen per pair of peers, shared memory to a peer on this host, ZeroMQ (tcp) to a peer
  // on another (a world that spans hosts runs both: link/pair_link.h); shm, zmq (ipc on one
  // host, tcp between hosts), tcp, ipc. "auto" yields to DISTRL_TRANSPORT when it is set.
  std::string transport = "auto";
  std::string bind_host;  // tcp interface; default: loopback, or the one reaching the master
  // How long the I/O thread polls before it sleeps. 0 on small machines: with more busy
  // threads than cores a spinning thread steals the CPU from the one with work
  // (docs/benchmarks.md, "Measurements behind decisions in the code"). Try 20-50 us where
  // cores are plentiful.
  std::chrono::microseconds io_spin{0};
  // Shared memory: the most a waiter (the I/O thread after activity, a caller waiting for its
  // reply) spins before it sleeps on a futex; adaptive (a spin that keeps failing stops): a
  // wake-up costs far more than the spin (docs/benchmarks.md, "Measurements behind decisions
  // in the code").
  std::chrono::microseconds shm_spin{20};
  // Runs first on every thread that runs handlers (the pool, and the I/O thread for RunOn::
  // IoThread): per-thread library state belongs here. LibTorch's intra-op thread count is per
  // thread and a new thread gets every core, so torch::set_num_threads(n) in main does not
  // reach the handlers; `[] { at::init_num_threads(); }` does (distrl's tools set it; without
  // it the ResNet-50 pipeline's shards oversubscribed 2 vCPUs).
  std::function<void()> thread_init;
  WireLimits limits;
  // A member's call (or fork notice) naming an object this worker has not seen created waits
  // for the creating request -- an RRef passed on by another member can overtake it -- for at
  // most unknown_object_wait; at most max_unknown_objects such names wait at once, and the
  // calls waiting so hold at most max_parked_bytes (their messages' bytes) per member. Past any
  // of these the call fails at once with "no object", naming the bound (a forged or stale id
  // costs a bounded amount of memory, never growth). An outsider's call (src -1: not a member,
  // so it holds no RRef whose creation could be in flight) to such an object fails at once.
  std::chrono::milliseconds unknown_object_wait{5000};
  std::size_t max_unknown_objects = 1024;
  std::size_t max_parked_bytes = 64 << 20;
};

// The one way a launched rank's options are built (the RL tools, the training tools and the
// tests): its rank and the world's size (-1: from the environment), where the ranks meet
// (env://, tcp://host:port, file:///path), the default per-call deadline and the transport.
// The caller then sets what is its own (name, threads, rendezvous and shutdown deadlines).
inline RpcOptions rank_options(int rank, int world_size, std::string init_method, std::chrono::milliseconds rpc_timeout,
                               std::string transport) {
  RpcOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.init_method = std::move(init_method);
  o.rpc_timeout = rpc_timeout;
  o.transport = std::move(transport);
  return o;
}

struct WorkerInfo {
  std::string name;
  int rank = -1;
  std::string host;      // hostname
  std::string endpoint;  // the endpoint this process uses to reach it; its scheme names the link (shm, tcp, ipc)
};

// Where a call goes: a worker name or rank, and optionally a timeout for this call
// (0: the agent's rpc_timeout).  rpc_sync<int>(Target{"ps", 5s}, "get", 1)
struct Target {
  Target(const char* worker) : name(worker) {}
  Target(std::string worker, std::chrono::milliseconds t = std::chrono::milliseconds(0))
      : name(std::move(worker)), timeout(t) {}
  Target(int worker_rank, std::chrono::milliseconds t = std::chrono::milliseconds(0)) : rank(worker_rank), timeout(t) {}
  std::string name;
  int rank = -1;
  std::chrono::milliseconds timeout{0};
};

// Counters, readable at any time.
struct RpcStats {
  std::uint64_t calls_sent = 0;
  std::uint64_t calls_served = 0;
  std::uint64_t bad_messages = 0;      // refused at decode (answered when they had a caller)
  std::uint64_t dropped_messages = 0;  // refused with no one to answer
  std::uint64_t timeouts = 0;
  std::uint64_t live_objects = 0;      // RRef-owned objects held here
  std::uint64_t releases_refused = 0;  // RRef releases from a rank that does not hold the fork
  // Message bytes (every frame: header, body, tensor frames; not ZeroMQ's framing or TCP/IP's)
  // this worker sent and received: requests, replies and notices, both paths.
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  MSGPACK_DEFINE(calls_sent, calls_served, bad_messages, dropped_messages, timeouts, live_objects, releases_refused,
                 bytes_sent, bytes_received);
};

}  // namespace distrl::transport
