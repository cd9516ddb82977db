// RpcCore's state, shared by rpc/rpc_core.cpp (lifecycle, outgoing calls), rpc/rpc_serve.cpp
// (incoming requests) and rref.cpp (the owner table). Private to transport/.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <shared_mutex>
#include <unordered_map>

#include "common/log.h"
#include "transport/rpc/detail/rpc_core.h"
#include "transport/detail/endpoints.h"
#include "transport/detail/io_loop.h"
#include "transport/message_hooks.h"
#include "transport/rendezvous.h"
#include "transport/thread_pool.h"

namespace distrl::transport::detail {

using Clock = std::chrono::steady_clock;

constexpr const char* kFetchMethod = "__rref_fetch";
constexpr const char* kForkFn = "__rref_fork";
constexpr const char* kReleaseFn = "__rref_del";
constexpr const char* kRejoinFn = "__rejoin";  // a restarted rank's new address (Control)

struct RpcCore::State {
  RpcOptions opts;
  int rank = -1;
  int world = 0;
  std::vector<WorkerInfo> workers;
  std::unordered_map<std::string, int> by_name;
  std::unique_ptr<Rendezvous> rdv;
  std::shared_ptr<zmq::context_t> ctx;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<IoLoop> io;
  std::string ipc_path;
  Address me;                     // as published at rendezvous
  std::int64_t incarnation = 1;   // this process's: 1, or more for a rank that rejoined
  // "rpc-r<rank>-<random>-": every DEALER of this process connects under it, so a server can
  // check that a message's src is the rank of the connection it came on (rank_of_identity).
  std::string identity_prefix;
  std::atomic<std::uint64_t> channels_made{0};
  std::vector<std::int64_t> peer_incarnation;  // I/O thread only: the latest heard of each rank
  // Bumped (under chan_mu) each time a rank rejoins: a synchronous call to the earlier process
  // fails, and a channel connected to it is not reused.
  std::unique_ptr<std::atomic<std::uint64_t>[]> peer_epoch;
  // Times each rank's connection was reported lost (RpcAgent::connection_drops).
  std::unique_ptr<std::atomic<std::uint64_t>[]> peer_drops;
  std::atomic<bool> running{false};
  std::atomic<bool> stopped{false};

  // Registry: written at registration, read by every call.
  std::shared_mutex reg_mu;
  std::unordered_map<std::string, std::shared_ptr<const Callable>> functions;
  std::unordered_map<std::type_index, std::shared_ptr<const ClassInfo>> classes;

  // Outgoing calls (I/O thread only).
  struct Pending {
    int dest;
    std::string fn;
    Completion done;
    Clock::time_point deadline;
    std::chrono::milliseconds timeout;
  };
  std::unordered_map<std::uint64_t, Pending> pending;
  std::multimap<Clock::time_point, std::uint64_t> deadlines;
  std::atomic<std::uint64_t> next_call_id{1};
  std::mutex inflight_mu;
  std::condition_variable inflight_cv;
  std::size_t inflight = 0;  // calls sent and not completed, for shutdown

  // Objects owned here (RRef targets).
  struct Object {
    Promise<std::shared_ptr<void>> promise;
    Future<std::shared_ptr<void>> value = promise.get_future();
    std::type_index type = typeid(void);
    std::function<void(const void*, Packer&)> pack;
    bool constructed_seen = false;  // the creating request has arrived
    // Live forks -> the rank holding each (only it may release it); releases that overtook
    // their fork notice -> the rank that sent them (at most kMaxEarlyReleases per object).
    std::map<std::uint64_t, int> forks, released_early;
  };
  static constexpr std::size_t kMaxEarlyReleases = 64;
  std::uint64_t releases_refused = 0;  // by a rank that does not hold the fork, or past the cap
  std::mutex obj_mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<Object>> objects;

  // Peers whose connection dropped (set on the I/O thread, read by shutdown and the fast
  // path): a dead peer cannot arrive at the shutdown barrier, so shutdown publishes it and
  // counts it as arrived; a synchronous call waiting on it fails with its reason.
  std::mutex down_mu;
  std::map<int, std::string> down_peers;  // rank -> why its connection was lost

  // The synchronous fast path's channels (rpc_core.cpp, call_sync): a DEALER per peer and per
  // concurrent synchronous caller, checked out for one call and put back; closed at shutdown
  // (a channel in use then is closed when its call gives it back).
  struct Channel {
    zmq::socket_t socket;
    std::uint64_t epoch = 0;  // peer_epoch[dest] when it connected
  };
  std::mutex chan_mu;
  std::vector<std::vector<std::unique_ptr<Channel>>> idle_channels;  // by peer rank
  std::vector<std::string> endpoints;  // by peer rank, where channels connect (changes on rejoin)
  bool channels_closed = false;

  // Set once in setup, before any traffic (RpcAgent::set_hooks); read by every thread after.
  std::shared_ptr<MessageHooks> hooks;
  // Set once in setup (RpcAgent::after_requests_read); run by the I/O thread only.
  std::function<void()> after_requests_read;

  std::atomic<std::uint64_t> calls_sent{0}, calls_served{0}, bad{0}, dropped{0}, timeouts{0};
  std::atomic<std::uint64_t> sync_bytes_sent{0}, sync_bytes_received{0};  // the fast path's (the I/O loop counts its own)
  RateLimiter bad_log{std::chrono::milliseconds(1000)};

  const std::string& worker_name(int r) const {
    static const std::string unknown = "(unknown)";
    return r >= 0 && r < static_cast<int>(workers.size()) ? workers[r].name : unknown;
  }

  // Object table helpers (obj_mu held by caller).
  // Objects named before their creating request arrived, oldest first: expire() fails the ones
  // still not created after opts.unknown_object_wait.
  std::deque<std::pair<Clock::time_point, std::uint64_t>> unknown_objects;
  std::uint64_t unknown_refused = 0;  // names refused because max_unknown_objects were waiting
  // Bytes of the calls waiting on objects not seen created, per member rank (max_parked_bytes);
  // a rank's entry goes when its last such call is answered.
  std::map<int, std::size_t> parked_bytes;
  Clock::time_point next_unknown_sweep{};  // I/O thread only: expire() looks every 100 ms

  // The object with this id; a new placeholder when there is none (null when max_unknown_objects
  // placeholders wait already). creating: the creating request itself (never refused).
  std::shared_ptr<Object> object_locked(std::uint64_t id, bool creating = false) {
    auto it = objects.find(id);
    if (it != objects.end()) return it->second;
    if (!creating) {
      if (unknown_objects.size() >= opts.max_unknown_objects) {
        ++unknown_refused;
        return nullptr;
      }
      unknown_objects.emplace_back(Clock::now(), id);
    }
    return objects.emplace(id, std::make_shared<Object>()).first->second;
  }
  // A new fork of object id, held by rank holder.
  void add_fork_locked(std::uint64_t id, std::uint64_t fork, int holder) {
    auto o = object_locked(id);
    if (!o) return;
    auto early = o->released_early.find(fork);
    if (early != o->released_early.end() && early->second == holder) o->released_early.erase(early);
    else o->forks[fork] = holder;
  }
  // Rank `from` lets go of a fork. Only the fork's holder can: a release from any other rank
  // is refused (counted) and frees nothing. Returns the object when this was its last
  // reference: the caller lets it go after unlocking, since its destructor may release RRefs
  // and so take obj_mu again.
  [[nodiscard]] std::shared_ptr<Object> release_fork_locked(std::uint64_t id, std::uint64_t fork, int from) {
    auto o = object_locked(id);
    if (!o) return nullptr;
    auto it = o->forks.find(fork);
    if (it == o->forks.end()) {  // its fork notice is still on the way (or the fork never was)
      if (o->released_early.size() < kMaxEarlyReleases) o->released_early.emplace(fork, from);
      else ++releases_refused;
      return nullptr;
    }
    if (it->second != from) {
      ++releases_refused;
      return nullptr;
    }
    o->forks.erase(it);
    if (!o->forks.empty() || !o->released_early.empty() || !o->constructed_seen) return nullptr;
    objects.erase(id);
    return o;
  }
};


// I/O thread entry points (rpc/rpc_core.cpp).
void on_reply(RpcCore::State& s, int peer, IoLoop::Frames&& frames);
void on_peer_down(RpcCore::State& s, int peer, const std::string& why);
void on_peer_up(RpcCore::State& s, int peer);  // its connection came back: calls go through again
// A rank announced it restarted (kRejoinFn): calls to the earlier process fail, the connection
// moves to the new one and the rank counts as alive again.
void on_rejoin(RpcCore::State& s, int peer, const InMessage& m);
void expire(RpcCore::State& s, Clock::time_point now);
// Lets the hooks see the message's tensors that require grad (when it has any).
void attach_hooks(RpcCore::State& s, InMessage& m);
// A refused message: counted (bad; dropped too when nobody was answered) and logged, rate-limited
// (rpc/rpc_serve.cpp).
void count_bad(RpcCore::State& s, const std::string& what, bool answered);
// I/O thread entry point (rpc/rpc_serve.cpp).
void on_request(RpcCore& core, RpcCore::State& s, zmq::message_t&& routing, IoLoop::Frames&& frames);

}  // namespace distrl::transport::detail
