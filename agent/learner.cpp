#include "agent/learner.h"

#include <torch/utils.h>

#include "agent/async_learner.h"
#include "agent/policy_actor.h"
#include "agent/ppo.h"
#include "agent/reinforce.h"
#include "agent/trajectories.h"
#include "common/error.h"

namespace distrl::agent {

void Learner::set_observers(int observers) { trajectories().set_observers(observers, observers); }

void Learner::stop_acting(bool) { trajectories().close(); }

ReleaseAtEnd::~ReleaseAtEnd() { intake.release(); }

TrajectoryOptions lockstep_intake(const rl::RlConfig& cfg, int obs_dim, int act_dim, bool episodes, int rollout) {
  TrajectoryOptions o;
  o.observers = o.queue = cfg.observers;  // the world's count replaces it (set_observers)
  o.envs = cfg.envs_per_observer;
  o.obs_dim = obs_dim;
  o.act_dim = act_dim;
  o.rollout = rollout;
  o.cut = episodes ? TrajectoryOptions::Cut::Episodes : TrajectoryOptions::Cut::Steps;
  o.lockstep = true;
  return o;
}

Algorithm make_algorithm(const rl::RlConfig& cfg, int obs_dim, int n_actions, int act_dim, Role role) {
  torch::manual_seed(cfg.seed);
  const std::uint64_t seed = static_cast<std::uint64_t>(cfg.seed) * 0x9E3779B97F4A7C15ull + 1;
  Algorithm a;
  if (!cfg.learner_device.empty() && !cfg.asynchronous())
    throw ConfigError("learner.device is " + cfg.learner_device + ", but learner.algo " + cfg.algo +
                      " learns where it acts (agent.device); learner.device is for appo and impala");
  if (cfg.agents > 1 && cfg.learners == 0)
    throw ConfigError("roles.agents is " + std::to_string(cfg.agents) +
                      ": several agents feed one learner process; "
                      "set roles.learners: 1 (and learner.algo appo or impala)");
  if (cfg.agents > cfg.observers)
    throw ConfigError("roles.agents is " + std::to_string(cfg.agents) + " but there are " +
                      std::to_string(cfg.observers) + " observers: every agent needs at least one (raise observers)");
  if (cfg.learners > 0 && !cfg.asynchronous())
    throw ConfigError("roles.learners is " + std::to_string(cfg.learners) + ", but learner.algo " + cfg.algo +
                      " learns in the agent between rounds; a learner process is for appo and impala");
  const auto device = role == Role::LearnerProcess && !cfg.learner_device.empty()
                          ? parse_device(cfg.learner_device, "learner.device")
                          : parse_device(cfg.device);
  if (cfg.actor_critic()) {
    models::ActorCriticSpec spec;
    spec.obs_dim = obs_dim;
    spec.n_actions = n_actions;
    spec.action_dim = act_dim;
    spec.hidden = cfg.hidden;
    spec.activation = cfg.activation;
    spec.shared = cfg.shared;
    spec.init_log_std = cfg.ppo_log_std_init;
    std::shared_ptr<models::ActorCritic> net;
    try {
      net = std::make_shared<models::ActorCritic>(spec);
    } catch (const ModelError& e) {
      throw ConfigError(std::string("model: ") + e.what());
    }
    auto actor = std::make_unique<PpoActor>(net, device, cfg.ppo.norm_obs, seed);
    rl::PpoOptions o = cfg.ppo;
    o.gamma = cfg.gamma;
    o.lr = cfg.lr;
    o.seed = seed + 2;
    if (cfg.asynchronous()) {
      TrajectoryOptions intake;
      intake.observers = cfg.observers;  // the world's count replaces it (RlAgent::serve)
      intake.envs = cfg.envs_per_observer;
      intake.obs_dim = obs_dim;
      intake.act_dim = act_dim;
      intake.rollout = cfg.async.rollout;
      intake.queue = cfg.async.queue;
      if (cfg.async.batch > 0 && cfg.async.queue > 0)  // else known once the world is (set_observers)
        check_queue_holds_batch(cfg.async.queue, cfg.async.batch);
      const auto timeout = std::chrono::milliseconds(static_cast<long long>(cfg.rpc_timeout_s * 1000));
      // The agent's copy of a remote learner's network only holds what it installs: agent.device.
      const auto learner_device = cfg.learner_device.empty() || role == Role::LearnerProcess || cfg.learners > 0
                                      ? device
                                      : parse_device(cfg.learner_device, "learner.device");
      a.learner = std::make_unique<AsyncLearner>(
          *actor, cfg.algo == "impala" ? AsyncLearner::Loss::Impala : AsyncLearner::Loss::Appo, o, cfg.async, intake,
          cfg.solved_window, timeout, learner_device);
    } else {
      a.learner = std::make_unique<Ppo>(*actor, o, lockstep_intake(cfg, obs_dim, act_dim, false, cfg.ppo_steps),
                                        cfg.solved_window);
    }
    a.actor = std::move(actor);
    return a;
  }
  if (act_dim > 0)
    throw ConfigError("env.name: " + cfg.env +
                      " has continuous actions; REINFORCE here needs a discrete env "
                      "(use learner.algo=ppo)");
  models::PolicySpec spec;
  spec.obs_dim = obs_dim;
  spec.n_actions = n_actions;
  spec.hidden = cfg.hidden;
  spec.dropout = cfg.dropout;
  std::shared_ptr<models::PolicyNet> net;
  try {
    net = models::make_policy(cfg.model, spec);
  } catch (const ModelError& e) {
    throw ConfigError(std::string("model: ") + e.what());
  }
  auto actor = std::make_unique<PolicyActor>(net, device, obs_dim, seed);
  ReinforceOptions o;
  o.gamma = cfg.gamma;
  o.lr = cfg.lr;
  // An episode has at most learner.max_steps steps (the observers truncate it), so every env
  // ends one within that many steps of a trajectory's start.
  a.learner = std::make_unique<Reinforce>(*actor, o, lockstep_intake(cfg, obs_dim, 0, true, cfg.max_steps));
  a.actor = std::move(actor);
  return a;
}

}  // namespace distrl::agent
