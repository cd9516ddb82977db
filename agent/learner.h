// The seam between the RL round loop (rl_agent.cpp) and an algorithm. An algorithm is an
// Actor (what an observer's act request runs, on the serving threads) and a Learner (its
// trajectories' intake, and how a round learns from them, on the agent's main thread). Every
// observer runs its own loop; the agent assembles what it reports into trajectories
// (trajectories.h). REINFORCE (reinforce.h: PolicyActor + Reinforce) and PPO (ppo.h: PpoActor +
// Ppo) are synchronous: their intake is in lockstep, so a round takes one trajectory from every
// observer while acting waits at the round's end, learns, and lets the observers go on. APPO /
// IMPALA (async_learner.h: PpoActor + AsyncLearner) learn while the observers act on. make_algorithm
// picks one from the config.
//
// Lifetime: the Learner holds a reference to its Actor; Algorithm owns both and destroys the
// Learner first. Threads: Actor::act is called concurrently from the RPC I/O loop, pool
// threads and the batcher's timer (docs/threads.md); everything else only from the thread
// that runs the rounds. A Learner changes the weights only under Actor::exclusive(), so a
// request never sees a half-updated network.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "rl/protocol.h"
#include "rl/rl_config.h"

namespace distrl::agent {

class ObserverPool;
class Trajectories;
struct TrajectoryOptions;

// Refuses rl.device values this build or machine cannot run ("cpu", "cuda[:N]") with a
// ConfigError, before anything starts; torch-free for the agent's main.
void check_device(const std::string& name, const std::string& key = "agent.device");

class Actor {
 public:
  virtual ~Actor() = default;
  // One action per row of obs (rows x obs_dim floats). Thread-safe.
  virtual rl::ActReply act(const float* obs, int rows) = 0;
  // The action --eval plays: PPO the most likely one, REINFORCE a sampled one (as the
  // tutorial evaluates its stochastic policy).
  virtual rl::ActReply act_eval(const float* obs, int rows) = 0;
  // Held while the weights change; acting waits meanwhile.
  virtual std::unique_lock<std::shared_mutex> exclusive() = 0;
};

// A run's progress, carried across --resume by the checkpoint: a resumed run continues at
// round rounds + 1, counts on and appends to metrics.csv.
struct Progress {
  int rounds = 0;
  long long episodes = 0, env_steps = 0;
  double seconds = 0;  // time spent in rounds, over every run of this output directory
  double running_reward = 0;
};

// What one round brought in.
struct RoundData {
  std::vector<double> returns;  // one per episode that ended in this round
  long long env_steps = 0;
  std::vector<float> latency_us;  // the observers' act round trips (one per request)
  double observer_cpu_us = 0;     // the observers' CPU time for this round, summed
  double loss = 0;                // 0 with learning off
  // Asynchronous learners: how many policy versions the learned steps were behind (mean, max),
  // and the trajectories dropped so far as older than async.max_lag.
  double lag_mean = 0;
  long long lag_max = 0, dropped = 0;
  // roles.agents > 1: another agent's run is over (the learner process said stop): this one ends.
  bool ended_elsewhere = false;
  // What acting a trajectory took: its env steps, the observers' round trips and CPU time.
  void add_acting(const rl::Fragment& f) {
    env_steps += static_cast<long long>(f.transitions());
    latency_us.insert(latency_us.end(), f.latency_us.begin(), f.latency_us.end());
    observer_cpu_us += f.cpu_us;
  }
};

// Where a learner's updates spend their time (rl/protocol.h: a learner process sends them).
using LearnerTimes = rl::LearnerTimes;

// Seconds from `from` to `to`, for LearnerTimes.
inline double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

class Learner {
 public:
  virtual ~Learner() = default;
  // One round: the synchronous learners take one trajectory from every live observer
  // (ObserverPool::gather) and update once when `learn`; the asynchronous ones one learner step.
  // Throws TransportError when every observer is gone.
  virtual RoundData round(ObserverPool& pool, bool learn) = 0;
  // The running reward once this round's returns are in; and whether it counts as solved.
  virtual double running_reward(const std::vector<double>& returns, double previous) = 0;
  virtual bool solved(double running_reward, double target) const = 0;
  // Weights, optimizer and the algorithm's own statistics, with `numbers` (the progress);
  // atomically (temp file + rename). Takes the actor's exclusive lock.
  virtual void save(const std::string& path, const std::map<std::string, double>& numbers) = 0;
  // The inverse; returns the numbers. Throws ConfigError for a checkpoint of another shape.
  virtual std::map<std::string, double> load(const std::string& path) = 0;
  // Appended to the "resumed from" line, e.g. the observation statistics' sample count.
  virtual std::string resume_note() const { return ""; }
  // What the observers' act requests feed.
  virtual Trajectories& trajectories() = 0;
  // An actor-critic (ppo, appo, impala; their checkpoints are alike), or REINFORCE's policy.
  virtual bool actor_critic() const { return true; }
  // The world's observer count, once it is known (before serving). ConfigError for settings it
  // makes impossible.
  virtual void set_observers(int observers);
  // The run is over: observers are told to stop at their next request (and held ones let go).
  // `ended`: it ended as runs end (solved, out of rounds, a signal), not by a failure; with a
  // learner process, the other agents' runs then end too.
  virtual void stop_acting(bool ended);
  virtual LearnerTimes times() const { return {}; }
};

// The intake of a synchronous learner: in lockstep, one trajectory per observer per round, of
// `rollout` steps (PPO) or until every env has ended an episode (REINFORCE, `rollout` then caps it).
TrajectoryOptions lockstep_intake(const rl::RlConfig& config, int obs_dim, int act_dim, bool episodes, int rollout);

// A synchronous round's end: the observers held at it go on (with the new weights) however the
// round ends, an exception included.
struct ReleaseAtEnd {
  Trajectories& intake;
  ~ReleaseAtEnd();
};

struct Algorithm {
  std::unique_ptr<Actor> actor;  // declared first: destroyed after the learner
  std::unique_ptr<Learner> learner;
};

// Which process builds the algorithm: the agent (acting on agent.device; with roles.learners 0
// also learning, on learner.device) or distrl-learner (roles.learners 1: everything on
// learner.device; its actor only holds what it publishes).
enum class Role { Agent, LearnerProcess };

// learner.algo from the config (reinforce, ppo, appo or impala), its network built for the env's spaces
// (act_dim > 0: continuous actions) on config.device. Throws ConfigError for a bad model, a
// continuous env under REINFORCE or roles.learners 1 with a synchronous algorithm.
Algorithm make_algorithm(const rl::RlConfig& config, int obs_dim, int n_actions, int act_dim, Role role = Role::Agent);

}  // namespace distrl::agent
