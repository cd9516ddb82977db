// The agent's observers: one remote Observer object per observer process (created in the
// constructor, as the tutorial's agent does with rpc.remote), whose loops start() sets going
// once; from then on they step on their own and their reports feed the learner's trajectories
// (trajectories.h). No call goes from agent to observer per round: a synchronous learner's round
// is gather(), one trajectory from every live observer, while acting waits at the round's end.
//
// An observer whose connection is lost, or that sends nothing for half of rpc.timeout_s in a
// synchronous round (the others wait for the round's answer within their own rpc.timeout_s), is
// dropped (named in the log; its unfinished trajectory discarded, its rows out of the
// batcher's waits) and the others go on. One that steps again later (it was stopped, or its
// host unreachable, for a while) is taken back (readmitted) at that step; one that died never
// steps again.
//
// Thread-safety: none; the agent's main thread owns the pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/batcher.h"
#include "agent/trajectories.h"
#include "rl/protocol.h"
#include "rl/rl_config.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::agent {

class ObserverPool {
 public:
  // Creates an Observer on every observer rank this agent serves (rl::agent_of_observer), running
  // config.env, and waits until each exists (a bad env name on an observer fails here, named).
  // `batcher` (may be null) is told which observers play, so a batch never waits for one that
  // does not.
  ObserverPool(transport::RpcAgent& rpc, const rl::RlConfig& config, Batcher* batcher);

  // Starts every observer's loop (run_stream); the ones that fail are dropped, named. Throws
  // TransportError when none started. Idempotent.
  void start(Trajectories& trajectories);
  // Drops the observers whose connection is lost and takes back the dropped ones that step
  // again (trajectories.live). Throws TransportError when none is left.
  void check(Trajectories& trajectories);
  // A synchronous round: starts the loops on the first call, then waits until every live
  // observer's trajectory is in (checking the pool meanwhile) and takes them. One that sends
  // none for half of rpc.timeout_s is dropped. Throws TransportError when every observer is gone.
  std::vector<rl::Fragment> gather(Trajectories& trajectories);

  // Tells every live observer the run is over (they then join the graceful shutdown).
  void finish();
  int size() const { return static_cast<int>(obs_.size()); }
  std::uint64_t drops(int observer) const { return drops_.at(static_cast<std::size_t>(observer)); }  // times dropped
  int lost() const { return lost_; }              // dropped and not back
  int readmitted() const { return readmitted_; }  // times an observer came back

 private:
  void drop(std::size_t i, Trajectories& trajectories, const std::string& why);

  transport::RpcAgent& rpc_;
  std::vector<transport::RRef<rl::ObserverObject>> obs_;
  std::vector<bool> alive_;
  std::vector<std::uint64_t> drops_;
  Batcher* batcher_;
  std::chrono::milliseconds timeout_;  // rpc.timeout_s
  bool started_ = false;
  int lost_ = 0, readmitted_ = 0;
};

}  // namespace distrl::agent
