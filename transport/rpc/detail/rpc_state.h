// RpcCore's state: the agent's identity and lifecycle, its threads, and the owned parts, each
// with its own lock and file (registry, object table, peer table, call table, channel pool).
// Shared by rpc_core.cpp (lifecycle), rpc_call.cpp (outgoing calls), rpc_serve.cpp (incoming
// requests) and rref.cpp. The rule that keeps the parts apart: no part calls another, and no
// code holds one part's lock while taking another's (each method locks, works on its own data
// and returns), so there is no lock order to get wrong; completions and objects that die run
// after the lock is released. Private to transport/rpc/.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "transport/link/endpoints.h"
#include "transport/link/link.h"
#include "transport/wire/message_hooks.h"
#include "transport/bootstrap/rendezvous.h"
#include "transport/rpc/detail/call_table.h"
#include "transport/rpc/detail/channel_pool.h"
#include "transport/rpc/detail/object_table.h"
#include "transport/rpc/detail/peer_table.h"
#include "transport/rpc/detail/registry.h"
#include "transport/rpc/detail/rpc_core.h"
#include "transport/runtime/thread_pool.h"

namespace distrl::transport::detail {

using Clock = std::chrono::steady_clock;

constexpr const char* kFetchMethod = "__rref_fetch";
constexpr const char* kForkFn = "__rref_fork";
constexpr const char* kReleaseFn = "__rref_del";
constexpr const char* kRejoinFn = "__rejoin";  // a restarted rank's new address (Control)

struct RpcCore::State {
  explicit State(RpcOptions options) : opts(std::move(options)), objects(opts) {}

  // Set in start(), read-only after it.
  RpcOptions opts;
  int rank = -1;
  int world = 0;
  std::vector<WorkerInfo> workers;
  std::unordered_map<std::string, int> by_name;
  Address me;                    // as published at rendezvous
  std::int64_t incarnation = 1;  // this process's: 1, or more for a rank that rejoined
  std::string ipc_path;
  // What peers' endpoints are chosen under (endpoint_for's argument): Auto when the link is a
  // PairLink (per pair), Shm for shared memory only, else ZeroMQ's.
  Transport link_transport = Transport::Auto;
  std::unique_ptr<Rendezvous> rdv;
  std::unique_ptr<ThreadPool> pool;
  // The transport (detail/link.h): its I/O thread runs the entry points below.
  std::unique_ptr<Link> link;
  std::atomic<bool> running{false};
  std::atomic<bool> stopped{false};
  // Set once in setup, before any traffic (RpcAgent::set_hooks); read by every thread after.
  std::shared_ptr<MessageHooks> hooks;
  // Set once in setup (RpcAgent::after_requests_read); run by the I/O thread only.
  std::function<void()> after_requests_read;

  // The owned parts.
  Registry registry;
  ObjectTable objects;
  PeerTable peers;
  CallTable calls;
  ChannelPool channels;

  std::atomic<std::uint64_t> calls_served{0}, bad{0}, dropped{0}, timeouts{0};
  std::atomic<std::uint64_t> sync_bytes_sent{0},
      sync_bytes_received{0};  // the fast path's (the I/O loop counts its own)
  RateLimiter bad_log{std::chrono::milliseconds(1000)};

  const std::string& worker_name(int r) const {
    static const std::string unknown = "(unknown)";
    return r >= 0 && r < static_cast<int>(workers.size()) ? workers[r].name : unknown;
  }
};

// "rpc to worker1 (rank 1) 'fn'": how every call failure names the call (rpc_call.cpp).
std::string describe_call(const RpcCore::State& s, int dest, const std::string& fn);
// TransportError: the call failed, and why.
std::exception_ptr call_failed(const RpcCore::State& s, int dest, const std::string& fn, const std::string& why);

// A pending call's completion (it has left the call table), run outside any lock; a completion
// that throws is logged. Then the call ends (CallTable::end). rpc_call.cpp.
void complete(RpcCore::State& s, CallTable::Pending& p, InMessage* m, std::exception_ptr err);

// I/O thread entry points (rpc_call.cpp).
void on_reply(RpcCore::State& s, int peer, Frames&& frames);
// A message the link took could not be sent after all (Link::Events::on_send_failed): a request
// fails its call now, naming why; a reply counts as dropped.
void on_send_failed(RpcCore::State& s, int peer, Frames&& frames, const std::string& why);
void on_peer_down(RpcCore::State& s, int peer, const std::string& why);
void on_peer_up(RpcCore::State& s, int peer);  // its connection came back: calls go through again
// A rank announced it restarted (kRejoinFn): calls to the earlier process fail, the connection
// moves to the new one and the rank counts as alive again.
void on_rejoin(RpcCore::State& s, int peer, const InMessage& m);
void expire(RpcCore::State& s, Clock::time_point now);
// Lets the hooks see the message's tensors that require grad (when it has any).
void attach_hooks(RpcCore::State& s, InMessage& m);
// A refused message: counted (bad; dropped too when nobody was answered) and logged, rate-limited
// (rpc_serve.cpp).
void count_bad(RpcCore::State& s, const std::string& what, bool answered);
// I/O thread entry point (rpc_serve.cpp).
void on_request(RpcCore& core, RpcCore::State& s, Caller&& from, Frames&& frames);

}  // namespace distrl::transport::detail
