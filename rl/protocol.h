// What agent and observers say to each other (msgpack structs, no LibTorch types, so an
// observer never builds a tensor):
//   agent -> observer   remote<Observer>(name, kObserverClass, ObserverSpec)
//                       observer.rpc_async<int>(kRunStream, 0)                   (once: its loop starts)
//                       observer.rpc_async<void>(kFinish)
//   observer -> agent   rpc_sync<ActReply>(kAgentName, kAct, StepReport)          (every step)
//   agent -> learner    rpc_sync<LearnReply>(kLearnerName, kLearn, LearnRequest)  (roles.learners 1)
//                       rpc_sync<PolicyWeights>(kLearnerName, kWeights, 0)
//                       rpc_sync<void>(kLearnerName, kFinished, agent)           (its run is over)
// The observer owns its loop: run_stream starts it and returns; from then on it steps its envs
// and sends every step's outcome with its next request (kAct) until a reply says stop. Every
// learner (REINFORCE, PPO, APPO, IMPALA) learns from the trajectories the agent assembles from
// those steps; the synchronous ones hold each observer's next step at the round's end until
// they have learned (agent/trajectories.h).
// Both sides use these names (the observer registers them, the agent calls them), so they
// cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/error.h"

namespace distrl::rl {

inline constexpr const char* kAgentName = "agent";         // the (first) agent's RPC worker name
inline constexpr const char* kObserverClass = "Observer";  // class registered by observers
inline constexpr const char* kFinish = "finish";           // Observer methods
inline constexpr const char* kRunStream = "run_stream";
inline constexpr const char* kAct = "act";              // function on the agent: a streaming observer's step
inline constexpr const char* kLearnerName = "learner";  // the learner process's worker name (roles.learners 1)
inline constexpr const char* kLearn = "learn";          // functions on the learner
inline constexpr const char* kWeights = "weights";
inline constexpr const char* kFinished = "finished";  // an agent's run is over: the others stop too

// The RL world's ranks: [0, agents) the agents ("agent", "agent1", ...; roles.agents), then the
// observers, observer rank r serving agent (r - agents) % agents, then (roles.learners 1) the
// learner process.
inline std::string agent_name(int agent) { return agent == 0 ? kAgentName : kAgentName + std::to_string(agent); }
inline int agent_of_observer(int rank, int agents) { return (rank - agents) % agents; }
// How many of `observers` serve agent `agent`.
inline int observers_of_agent(int agent, int observers, int agents) {
  return observers / agents + (agent < observers % agents ? 1 : 0);
}

struct ObserverSpec {
  std::string agent;    // the agent's worker name
  int observer_id = 0;  // 0..N-1, the batcher's slot for this observer
  std::string env = "CartPole-v1";
  int num_envs = 1;           // envs stepped together; one request carries all their rows
  std::uint64_t seed = 0;     // env i of this observer is seeded seed + i
  int max_episode_steps = 0;  // learner.max_steps: episodes truncated at this many steps (0: the env's limit)
  MSGPACK_DEFINE(agent, observer_id, env, num_envs, seed, max_episode_steps);
};

// The answer to one act request, per observation row: the action (discrete: `actions`;
// continuous: act_dim values in `cont_actions`), its log-probability, and for actor-critic
// learners the critic's value; the policy version that chose them (0 for the synchronous
// learners); and, to a streaming observer, `stop`: the run is over, leave the loop (no actions).
struct ActReply {
  std::vector<std::int32_t> actions;
  std::vector<float> log_probs;
  std::vector<float> values;
  std::vector<float> cont_actions;
  std::int64_t version = 0;
  bool stop = false;
  MSGPACK_DEFINE(actions, log_probs, values, cont_actions, version, stop);

  int rows() const { return static_cast<int>(log_probs.size()); }
  // Throws ProtocolError unless every field is sized for `rows` rows (values optional).
  void check(int rows) const {
    const std::size_t n = static_cast<std::size_t>(rows);
    const bool discrete = cont_actions.empty();
    if (log_probs.size() != n || (discrete ? actions.size() != n : (!actions.empty() || cont_actions.size() % n)) ||
        (!values.empty() && values.size() != n))
      throw ProtocolError("act answered " + std::to_string(log_probs.size()) + " log-probs, " +
                          std::to_string(actions.size()) + " actions, " + std::to_string(cont_actions.size()) +
                          " continuous action values and " + std::to_string(values.size()) + " values for " +
                          std::to_string(rows) + " observations");
  }
  // Rows [at, at + n) (after check()).
  ActReply slice(int at, int n) const {
    ActReply r;
    auto part = [&](const auto& v, std::size_t width, auto& out) {
      if (!v.empty()) out.assign(v.begin() + at * width, v.begin() + (at + n) * width);
    };
    const std::size_t act_dim = cont_actions.empty() ? 0 : cont_actions.size() / log_probs.size();
    part(actions, 1, r.actions);
    part(log_probs, 1, r.log_probs);
    part(values, 1, r.values);
    part(cont_actions, act_dim, r.cont_actions);
    r.version = version;
    return r;
  }
};

// One trajectory: `steps` steps of each of an observer's `num_envs` envs, time-major (index
// [t * num_envs + e]), assembled by the agent from the observer's StepReports (agent/
// trajectories.h); episodes continue across trajectories (envs restart on their own). PPO fills
// last_values and truncated_values from next_obs and final_obs before it learns.
struct Fragment {
  int observer_id = 0;
  int obs_dim = 0;
  int act_dim = 0;  // 0: discrete actions in `actions`, else `cont_actions`
  int num_envs = 0;
  int steps = 0;
  std::vector<float> obs;                // [steps, num_envs, obs_dim], the observation acted on
  std::vector<std::int32_t> actions;     // [steps, num_envs]
  std::vector<float> cont_actions;       // [steps, num_envs, act_dim]
  std::vector<float> log_probs;          // [steps, num_envs], the acting policy's
  std::vector<float> values;             // [steps, num_envs], the critic's at acting time
  std::vector<float> rewards;            // [steps, num_envs]
  std::vector<std::uint8_t> terminated;  // [steps, num_envs]: the MDP ended after this step
  std::vector<std::uint8_t> truncated;   // [steps, num_envs]: the time limit cut the episode
  std::vector<float> truncated_values;   // [steps, num_envs]: V(final observation) where truncated, else 0
  std::vector<float> last_values;        // [num_envs]: V(observation after the last step)
  std::vector<float> episode_returns;    // episodes that ended inside this fragment
  std::vector<std::int32_t> episode_lengths;
  std::vector<float> latency_us;
  double cpu_us = 0;                   // the observer process's CPU time (getrusage) for these steps
  std::vector<float> next_obs;         // [num_envs, obs_dim]: the observation after the last step
  std::vector<float> final_obs;        // [truncated-not-terminated steps, obs_dim], time-major order
  std::vector<std::int64_t> versions;  // [steps]: the policy version that chose each step's actions
  MSGPACK_DEFINE(observer_id, obs_dim, act_dim, num_envs, steps, obs, actions, cont_actions, log_probs, values, rewards,
                 terminated, truncated, truncated_values, last_values, episode_returns, episode_lengths, latency_us,
                 cpu_us, next_obs, final_obs, versions);

  std::size_t transitions() const { return static_cast<std::size_t>(steps) * num_envs; }
};

// One step of an observer (kAct): the observations to act on now and what the previous
// request's actions did (all empty on the observer's first request).
struct StepReport {
  int observer_id = 0;
  std::uint64_t step = 0;                // this observer's requests before this one
  std::vector<float> obs;                // [num_envs, obs_dim]: act on these (restarted envs: their new start)
  std::vector<float> rewards;            // [num_envs]
  std::vector<std::uint8_t> terminated;  // [num_envs]
  std::vector<std::uint8_t> truncated;   // [num_envs]
  std::vector<float> final_obs;          // [truncated-not-terminated envs, obs_dim], in env order
  std::vector<float> episode_returns;    // the episodes those steps ended
  std::vector<std::int32_t> episode_lengths;
  float latency_us = -1;  // the previous request's round trip (-1: none)
  double cpu_us = 0;      // the observer process's CPU time since the previous request
  // A resend: the first try's answer was lost (the connection dropped mid-call), so the envs
  // did not step. The agent takes it as new when the first try never arrived, and acts on its
  // observations again when it did (the outcomes are not counted twice). A run that had dropped
  // this observer takes it back at its next step, whether or not it is a resend.
  bool restart = false;
  MSGPACK_DEFINE(observer_id, step, obs, rewards, terminated, truncated, final_obs, episode_returns, episode_lengths,
                 latency_us, cpu_us, restart);
};

// The learner's policy as the agent installs it: every parameter of the actor-critic, flat in
// the network's parameter order (both sides build it from the same config), and the
// observation statistics it normalises with (mean, variance, count: 2 * obs_dim + 1 values).
struct PolicyWeights {
  std::int64_t version = 0;
  std::vector<float> params;
  std::vector<double> obs_rms;
  MSGPACK_DEFINE(version, params, obs_rms);
};

// One learner step's batch from an agent. `version`: the newest policy version the agent has
// acted with (a restarted learner that lost versions numbers on from there, so a trajectory is
// never "from the future").
struct LearnRequest {
  int agent = 0;
  std::int64_t version = 0;
  std::vector<Fragment> batch;
  MSGPACK_DEFINE(agent, version, batch);
};

// What one asynchronous learner step did (agent::AsyncStats).
struct LearnStats {
  double policy_loss = 0, value_loss = 0, entropy = 0;
  double lag_mean = 0;
  long long lag_max = 0;
  std::uint64_t transitions = 0;    // learned from
  std::uint64_t dropped_stale = 0;  // trajectories older than async.max_lag in this batch
  MSGPACK_DEFINE(policy_loss, value_loss, entropy, lag_mean, lag_max, transitions, dropped_stale);
};

// Where a learner's updates spend their time, summed (wall clock on the learner's thread; on a
// GPU the phases are not synchronised, so there only the total is exact). The rest (total minus
// the phases) is the batch's preparation (advantages, V-trace, tensors) and statistics.
struct LearnerTimes {
  long long updates = 0, steps = 0;  // updates, and gradient steps within them
  long long rows = 0;                // rows over all gradient steps
  double forward_s = 0, backward_s = 0, optimizer_s = 0, total_s = 0;
  MSGPACK_DEFINE(updates, steps, rows, forward_s, backward_s, optimizer_s, total_s);
};

// What the step did, the learner's time so far (for the agent's end report), and the weights
// it made (the agent installs them for its next forward). `stop`: another agent's run is over
// (solved, out of rounds, stopped), so this one ends too; nothing was learned.
struct LearnReply {
  LearnStats stats;
  LearnerTimes times;
  PolicyWeights weights;
  bool stop = false;
  MSGPACK_DEFINE(stats, times, weights, stop);
};

}  // namespace distrl::rl

namespace distrl::rl {

// Rows in an act request's observations: obs must hold whole observations of obs_dim floats.
// Throws ProtocolError (the caller sees it as a RemoteError) otherwise.
// max_rows > 0: at most that many rows (an observer sends one row per env it steps).
inline int observation_rows(const std::vector<float>& obs, int obs_dim, int max_rows = 0) {
  if (obs.empty() || obs.size() % static_cast<std::size_t>(obs_dim) != 0)
    throw ProtocolError("act: " + std::to_string(obs.size()) + " floats are not whole observations of " +
                        std::to_string(obs_dim));
  const std::size_t rows = obs.size() / static_cast<std::size_t>(obs_dim);
  if (max_rows > 0 && rows > static_cast<std::size_t>(max_rows))
    throw ProtocolError("act: " + std::to_string(rows) + " observation rows in one request; at most " +
                        std::to_string(max_rows) + " (env.per_observer) are accepted");
  return static_cast<int>(rows);
}

// The observer's object as the agent's RRefs see it (only its methods are called remotely).
struct ObserverObject;
}  // namespace distrl::rl
