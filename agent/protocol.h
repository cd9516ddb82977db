// What agent and observers say to each other (msgpack structs, no LibTorch types, so an
// observer never builds a tensor):
//   agent -> observer   remote<Observer>(name, "Observer", ObserverSpec)
//                       observer.rpc_async<Rollout>("run_episode", max_steps)
//                       observer.rpc_sync<void>("finish")
//   observer -> agent   rpc_sync<ActReply>("agent", "select_action", observer_id, obs)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/error.h"

namespace distrl::agent {

inline constexpr const char* kSelectAction = "select_action";

struct ObserverSpec {
  std::string agent;          // the agent's worker name
  int observer_id = 0;        // 0..N-1, the batcher's slot for this observer
  std::string env = "CartPole-v1";
  int num_envs = 1;           // envs stepped together; one request carries all their rows
  std::uint64_t seed = 0;     // env i of this observer is seeded seed + i
  bool record_latency = false;
  MSGPACK_DEFINE(agent, observer_id, env, num_envs, seed, record_latency);
};

// The answer to one select_action: one action and its log-probability per observation row.
struct ActReply {
  std::vector<std::int32_t> actions;
  std::vector<float> log_probs;
  MSGPACK_DEFINE(actions, log_probs);
};

// One run_episode: every env's trajectory, one segment after another.
struct Rollout {
  int observer_id = 0;
  int obs_dim = 0;
  std::vector<float> obs;                // [steps, obs_dim]
  std::vector<std::int32_t> actions;     // [steps]
  std::vector<float> log_probs;          // [steps], the acting policy's
  std::vector<float> rewards;            // [steps]
  std::vector<std::int32_t> lengths;     // steps per segment (one segment per env)
  std::vector<std::uint8_t> terminated;  // per segment: the MDP ended (not cut by a limit)
  std::vector<float> latency_us;         // per select_action round trip, when asked for
  MSGPACK_DEFINE(observer_id, obs_dim, obs, actions, log_probs, rewards, lengths, terminated, latency_us);

  std::size_t steps() const { return rewards.size(); }
};

}  // namespace distrl::agent

namespace distrl::agent {

// Rows in a select_action request: obs must hold whole observations of obs_dim floats.
// Throws ProtocolError (the caller sees it as a RemoteError) otherwise.
inline int observation_rows(const std::vector<float>& obs, int obs_dim) {
  if (obs.empty() || obs.size() % static_cast<std::size_t>(obs_dim) != 0)
    throw ProtocolError("select_action: " + std::to_string(obs.size()) +
                                " floats are not whole observations of " + std::to_string(obs_dim));
  return static_cast<int>(obs.size() / static_cast<std::size_t>(obs_dim));
}

// The observer's object as the agent's RRefs see it (only its methods are called remotely).
struct ObserverObject;
inline constexpr const char* kObserverClass = "Observer";
}  // namespace distrl::agent
