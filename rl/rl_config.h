// The RL run configuration (configs/cartpole.yaml): one struct, bound to dotted keys so a
// YAML file and command-line overrides fill it with validation. distrl-agent and
// distrl-observer read the same file; observers take only the rpc.* part, the agent sends
// them the rest.
#pragma once

#include <string>
#include <vector>

#include "rl/async_options.h"
#include "rl/ppo_options.h"
#include "common/command_line.h"
#include "common/settings.h"
#include "transport/rpc/options.h"

namespace distrl::rl {

struct RlConfig {
  std::string workload = "rl";  // the only value: a file without the key is read as rl (rl/cli.h says so)
  // run
  int seed = 1;
  std::string out_dir = "runs/cartpole";
  bool tensorboard = true;  // run.tensorboard: TensorBoard event files beside metrics.csv
  // env
  std::string env = "CartPole-v1";
  std::string env_plugin;  // env.plugin: a shared library of environments (envs/plugin.h)
  int envs_per_observer = 1;
  int observers = 4;
  // agent
  std::string device = "cpu";
  std::string mode = "batched";
  int max_batch = 256;
  int max_wait_us = 5000;
  std::string batch_close = "all";  // all: lock-step over the active observers; read: what arrived together
  int torch_threads = 1;
  bool serve_inline = true;  // act requests on the RPC I/O thread (no hand-off to the pool)
  // model
  std::string model = "mlp";
  std::vector<int> hidden{128};
  double dropout = 0.0;
  std::string activation = "tanh";  // ppo actor-critic
  bool shared = false;              // ppo: one trunk for policy and value
  // learner
  std::string algo = "reinforce";
  double gamma = 0.99;
  double lr = 1e-2;
  int rounds = 1000;    // learner.rounds: one trajectory per observer per round (REINFORCE, PPO)
  int max_steps = 500;  // steps per episode (the env's own limit still applies)
  double target_reward = 475;
  bool learn = true;
  int log_interval = 10;
  int checkpoint_every = 0;  // rounds; 0: only at the end
  // ppo
  int ppo_steps = 128;  // steps per env per trajectory (one per observer per round)
  PpoOptions ppo;       // the ppo.* learner keys (gamma, lr and seed are set from learner.*, run.*)
  double ppo_log_std_init = 0.0;
  int solved_window = 100;  // ppo: "solved" = mean return of the last N episodes >= target
  // appo, impala (the ppo.* keys they share: clip, epochs, minibatch, vf_coef, ent_coef, ...)
  AsyncOptions async;
  std::string learner_device;  // learner.device: where appo/impala's learner trains ("": agent.device)
  int learners = 0;            // roles.learners: 1 = appo/impala's learner in its own process (distrl-learner)
  int agents = 1;              // roles.agents: inference servers feeding that learner (ranks 0..agents-1)
  int max_restarts = 0;        // launch.max_restarts: distrl-launch restarts a dead rank (the learner process)
  bool asynchronous() const { return algo == "appo" || algo == "impala"; }
  bool actor_critic() const { return algo != "reinforce"; }
  // rpc
  std::string transport = "auto";
  double rpc_timeout_s = 60;
  int rpc_threads = 4;
  int shm_spin_us = 20;  // RpcOptions::shm_spin
};

void bind(Settings& s, RlConfig& c);
// After the keys are read: loads env.plugin (made absolute) and checks env.name against every
// registered environment. ConfigError naming the key.
void prepare_env(RlConfig& c);

transport::RpcOptions rpc_options(const RlConfig& c, const WorldFlags& w, const std::string& name);

}  // namespace distrl::rl
