// APPO and IMPALA: asynchronous actor-critic learners. Acting never waits for them: streaming
// observers step their envs and ask for actions (Trajectories assembles what they report into
// trajectories of async.rollout steps per env and queues them, bounded); this learner takes
// async.batch trajectories per step, corrects the policy lag with V-trace (vtrace.h), steps its
// own copy of the network and publishes the new weights to the acting PpoActor, versioned: the
// actor's forward and the copy take turns on its lock, so a batch is answered by one version.
//
//   appo:   PPO's clipped surrogate on the advantages q - V of V-trace's targets (Sample
//           Factory's APPO), value loss to the V-trace targets vs, entropy bonus; ppo.epochs
//           passes of ppo.minibatch rows (one pass over the whole batch by default: one forward
//           gives the values for V-trace and the loss).
//   impala: -min(pg_rho_bar, pi/mu) (q - V) log pi, the same value loss and entropy bonus, one
//           gradient step per batch (Espeholt et al. 2018).
//
// The policy lag of every learned step (the learner's version minus the version that acted) is
// measured per batch (mean, max); a trajectory whose oldest step is more than async.max_lag
// versions behind is dropped and counted. Learning off (benchmarks) takes the batches and
// learns nothing.
//
// roles.learners 1 (use_remote): the batches go to distrl-learner (learner_service.h), whose own
// AsyncLearner learns them and answers with its weights, which this one installs in the actor.
// Acting goes on while the learner is unreachable (its process died and is restarting): the
// batches of that time are dropped and counted, and the first reply after it is back brings
// its weights (from its last checkpoint).
//
// Threads: round(), save(), load() on the agent's main thread (the learner); trajectories()
// is fed by the serving threads. The learner's network is its own; the actor's is touched only
// under the actor's exclusive lock, by publish(). In distrl-learner every call is made under
// the service's lock.
#pragma once

#include <torch/types.h>

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/flat_adam.h"
#include "agent/learner.h"
#include "agent/ppo.h"
#include "agent/trajectories.h"
#include "agent/vtrace.h"
#include "models/actor_critic.h"
#include "rl/async_options.h"
#include "rl/ppo_options.h"
#include "rl/protocol.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::agent {

using AsyncStats = rl::LearnStats;  // what one step did (a learner process sends it)

// ConfigError unless a queue of `queue` trajectories holds a batch of `batch` (async.queue, async.batch).
void check_queue_holds_batch(int queue, int batch);

class AsyncLearner : public Learner {
 public:
  enum class Loss { Appo, Impala };
  // `timeout`: the longest wait for a batch before the run is called failed (rpc.timeout_s).
  // `device`: where this learner trains (learner.device); the actor's weights stay on its own.
  AsyncLearner(PpoActor& actor, Loss loss, rl::PpoOptions ppo, rl::AsyncOptions async, TrajectoryOptions intake,
               int solved_window, std::chrono::milliseconds timeout, torch::Device device);

  // One learner step on `batch` (checked: ProtocolError for a malformed trajectory): drops the
  // stale ones, V-trace, the loss, an optimizer step, publish. Public for tests.
  AsyncStats update(std::vector<rl::Fragment> batch);
  // The learner's weights to the actor (exclusive lock), as the next version.
  void publish();
  std::int64_t version() const { return version_; }
  models::ActorCritic& net() { return *net_; }

  // The learner process's side: the current weights (version, flat parameters, observation
  // statistics); a version to number on from (an agent acted with versions this learner lost
  // in a restart); the reply to a LearnRequest after update().
  rl::PolicyWeights weights() const;
  void advance_to(std::int64_t version) { version_ = std::max(version_, version); }
  rl::LearnReply reply(const AsyncStats& stats) const;
  // The agent's side: batches learn in the learner process `rpc` reaches as rl::kLearnerName;
  // install() puts a reply's weights in this copy and the actor (ProtocolError if they do not
  // fit the network). Call before the run.
  void use_remote(transport::RpcAgent& rpc) { remote_ = &rpc; }
  void install(const rl::PolicyWeights& w);

  RoundData round(ObserverPool& pool, bool learn) override;
  double running_reward(const std::vector<double>& returns, double previous) override {
    return recent_.running(returns, previous);
  }
  bool solved(double running_reward, double target) const override { return recent_.solved(running_reward, target); }
  void save(const std::string& path, const std::map<std::string, double>& numbers) override;
  std::map<std::string, double> load(const std::string& path) override;
  std::string resume_note() const override;
  Trajectories& trajectories() override { return intake_; }
  // Streaming observers leave their loops; a learner process hears that this agent's run has
  // ended (roles.agents > 1: it tells the other agents to stop too; not after a failure).
  void stop_acting(bool ended) override;
  // async.batch 0: one trajectory per observer; async.queue 0: one batch.
  void set_observers(int observers) override;
  LearnerTimes times() const override { return times_; }

 private:
  // The batch's trajectories fresh enough to learn from (the rest counted in st.dropped_stale),
  // each checked; st's lag and transitions filled in. ProtocolError for one from the future.
  std::vector<rl::Fragment> fresh(std::vector<rl::Fragment> batch, AsyncStats& st) const;
  // V-trace over each kept trajectory (values vp and log-ratios lr of its N steps, then the
  // bootstrap and truncated episodes' final values): the value targets and the loss's advantages.
  void vtrace_targets(std::vector<rl::Fragment>& keep, const float* vp, const float* lr, std::int64_t N,
                      std::vector<float>* targets, std::vector<float>* advantages);
  // One gradient step on rows whose advantages, behaviour log-probs and value targets are `cols`
  // (APPO's clipped surrogate or IMPALA's policy gradient, the value loss, the entropy bonus);
  // its losses added to st.
  void learn_step(const models::ActorCritic::Out& out, const torch::Tensor& logp,
                  const std::array<torch::Tensor, 3>& cols, std::chrono::steady_clock::time_point t0, AsyncStats& st);
  // net on the actor's device with the actor's weights (before the optimizer flattens them).
  static std::shared_ptr<models::ActorCritic> prepared(const std::shared_ptr<models::ActorCritic>& net, PpoActor& actor,
                                                       torch::Device device);
  // roles.learners 1: the learner process learns `batch` (false: it cannot be reached now, and
  // the batch is dropped); the learner's first weights before acting starts.
  bool learn_remotely(std::vector<rl::Fragment> batch, AsyncStats* stats);
  void fetch_remote_weights();
  PpoActor& actor_;
  torch::Device device_;
  Loss loss_;
  rl::PpoOptions o_;
  rl::AsyncOptions a_;
  std::shared_ptr<models::ActorCritic> net_;  // the learner's copy
  FlatAdam optimizer_;
  RunningMeanStd obs_rms_;  // the learner's; published with the weights
  RewardScaler scaler_;
  RecentReturns recent_;
  Trajectories intake_;
  std::chrono::milliseconds timeout_;
  std::int64_t version_ = 0;
  bool started_ = false;
  long long steps_seen_ = 0;  // intake_.stats().steps at the last round
  long long dropped_ = 0;     // stale trajectories so far
  std::mt19937_64 rng_;
  LearnerTimes times_;  // with a remote learner: its own, from its last reply
  transport::RpcAgent* remote_ = nullptr;
  std::chrono::steady_clock::time_point unreachable_since_{};  // the learner could not be reached (remote_)
  bool unreachable_ = false;
  bool ended_elsewhere_ = false;  // a reply said stop
  long long unlearned_ = 0;       // trajectories dropped while the learner was unreachable
};

}  // namespace distrl::agent
