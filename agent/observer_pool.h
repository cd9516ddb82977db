// The agent's observers: one remote Observer object per observer process (created in the
// constructor, as the tutorial's agent does with rpc.remote), called together every round,
// and told to finish at the end. An observer whose call fails or whose answer is malformed is
// dropped (named in the log) and the others go on. One dropped because its connection was lost
// is readmitted at the start of a later round if the connection comes back (the process was
// stopped, or its host unreachable, for a while); a malformed answer or a dead process is
// dropped for the rest of the run.
//
// Thread-safety: none; the agent's main thread owns the pool. call() blocks until every live
// observer has answered or failed (each call has the RPC timeout).
#pragma once

#include <string>
#include <vector>

#include "agent/batcher.h"
#include "agent/trajectories.h"
#include "common/error.h"
#include "common/log.h"
#include "rl/protocol.h"
#include "rl/rl_config.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::agent {

class ObserverPool {
 public:
  // Creates an Observer on every observer rank this agent serves (rl::agent_of_observer), running config.env, and waits until each
  // exists (a bad env name on an observer fails here, named). `batcher` (may be null) is told
  // which observers are playing, so a batch never waits for one that is not.
  // `stream`: the observers run their own loops (config.asynchronous()), started by start_streams.
  ObserverPool(transport::RpcAgent& rpc, const rl::RlConfig& config, bool fragments, Batcher* batcher,
               bool stream = false);

  // Streaming observers: starts every live one's loop (run_stream) and marks them all active in
  // the batcher for the rest of the run. Throws TransportError when none started.
  void start_streams(Trajectories& trajectories);
  // Drops the streaming observers whose connection is lost (named; their unfinished
  // trajectories discarded, their rows out of the batcher's waits). Throws TransportError when
  // none is left.
  void check_streams(Trajectories& trajectories);

  // Calls `method(arg)` on every live observer at once and returns the answers that pass
  // `check` (which throws for a malformed one). Throws TransportError when none is left.
  template <typename T, typename Check>
  std::vector<T> call(const char* method, int arg, Check check);

  // Tells every live observer the run is over (they then join the graceful shutdown), and
  // every dropped one whose connection has come back by now.
  void finish();
  int lost() const { return lost_; }            // dropped and not back
  int readmitted() const { return readmitted_; }  // times an observer came back

 private:
  // dropped_connection: the call failed with the connection (it dropped during the call, even
  // if it is back already): the observer may return and is readmitted when it does.
  void drop(std::size_t i, const std::exception& e, bool dropped_connection);
  void readmit();  // the dropped observers whose connection came back

  transport::RpcAgent& rpc_;
  std::vector<transport::RRef<rl::ObserverObject>> obs_;
  std::vector<bool> alive_;
  std::vector<bool> may_return_;  // dropped for a lost connection, not for what it sent
  Batcher* batcher_;
  int lost_ = 0, readmitted_ = 0;
};

template <typename T, typename Check>
std::vector<T> ObserverPool::call(const char* method, int arg, Check check) {
  readmit();
  std::vector<transport::Future<T>> futs(obs_.size());
  std::vector<std::uint64_t> drops(obs_.size(), 0);  // connection drops before the call
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    if (!alive_[i]) continue;
    drops[i] = rpc_.connection_drops(obs_[i].owner_name());
    const int id = static_cast<int>(i);  // the observer id the spec gave it
    Batcher* b = batcher_;
    if (b) b->set_active(id, true);
    futs[i] = obs_[i].template rpc_async<T>(method, arg).then([b, id](const transport::Future<T>& f) {
      if (b) b->set_active(id, false);
      return f.value();
    });
  }
  std::vector<T> out;
  std::string last_error;
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    if (!alive_[i]) continue;
    try {
      T r = futs[i].value();
      check(r);  // before the statistics or the learner read it
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      last_error = e.what();
      drop(i, e, rpc_.connection_drops(obs_[i].owner_name()) != drops[i]);
    }
  }
  if (out.empty()) throw TransportError("every observer is gone; the last error: " + last_error);
  return out;
}

}  // namespace distrl::agent
