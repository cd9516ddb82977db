#include "rl/rl_config.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "envs/env.h"

namespace distrl::rl {

namespace {

// run.*, env.* and the observer count.
void bind_run_and_env(Settings& s, RlConfig& c) {
  s.bind("run.seed", &c.seed, "seed for the network, action sampling and environments").range(0, 2147483647);
  s.bind("run.out_dir", &c.out_dir, "directory for metrics.csv, the checkpoint and the effective config").output_dir();
  s.bind("run.tensorboard", &c.tensorboard,
         "write TensorBoard event files (events.out.tfevents.*) beside metrics.csv: reward, running reward, "
         "loss, env-steps/s, seconds per round; tensorboard --logdir <run.out_dir>");
  std::string names;
  for (const auto& n : envs::env_names()) names += (names.empty() ? "" : ", ") + n;
  s.bind("env.name", &c.env,
         "environment: " + names +
             ", one that env.plugin adds, or gymnasium:ID (Gymnasium's own, stepped by "
             "Python: DISTRL_GYMNASIUM_PYTHON or python3)");
  s.bind("env.plugin", &c.env_plugin,
         "a shared library of environments to load first (envs/plugin.h, examples/env_plugin/); a relative path "
         "is from the current directory");
  s.bind("env.per_observer", &c.envs_per_observer, "environments each observer steps together").range(1, 4096);
  s.bind("observers", &c.observers, "observer processes (distrl-launch starts this many)").range(1, 1024);
}

// agent.* (serving) and model.*.
void bind_agent_and_model(Settings& s, RlConfig& c) {
  s.bind("agent.device", &c.device, "where the policy runs: cpu, cuda or cuda:N");
  s.bind("agent.mode", &c.mode, "batched: one forward per gathered batch; unbatched: one per request")
      .choices({"batched", "unbatched"});
  s.bind("agent.max_batch", &c.max_batch, "batched: rows that close a batch").range(1, 1 << 20);
  s.bind("agent.max_wait_us", &c.max_wait_us, "batched: longest wait after a batch's first request").range(0, 60000000);
  s.bind("agent.batch_close", &c.batch_close,
         "batched: all = a batch waits for every active observer (the tutorial's lock-step, max_wait at most); "
         "read = it closes once the I/O thread has read every waiting request (needs serve_inline)")
      .choices({"all", "read"});
  s.bind("agent.torch_threads", &c.torch_threads, "LibTorch intra-op threads on the agent").range(1, 256);
  s.bind("agent.serve_inline", &c.serve_inline,
         "answer the observers' act requests on the RPC I/O thread: two thread hand-offs fewer per request");
  s.bind("model.name", &c.model, "reinforce: policy network (ppo always uses an actor-critic)")
      .choices({"mlp", "tutorial"});
  s.bind("model.hidden", &c.hidden, "hidden layer widths (mlp, and each of ppo's actor and critic)").range(1, 65536);
  s.bind("model.dropout", &c.dropout, "mlp: dropout after each hidden layer").range(0, 0.99);
  s.bind("model.activation", &c.activation, "ppo: actor-critic activation").choices({"tanh", "relu"});
  s.bind("model.shared", &c.shared, "ppo: one trunk for policy and value");
}

// learner.* and ppo.*.
void bind_learning(Settings& s, RlConfig& c) {
  s.bind("learner.algo", &c.algo,
         "reinforce (whole episodes), ppo (fixed-length trajectories, actor-critic; both synchronous: acting "
         "pauses at the round's end while the learner updates), appo (PPO's clipped objective on V-trace targets) or "
         "impala (V-trace actor-critic); "
         "appo and impala are asynchronous: the observers act on while the learner updates")
      .choices({"reinforce", "ppo", "appo", "impala"});
  s.bind("learner.gamma", &c.gamma, "discount factor").range(0, 1);
  s.bind("learner.lr", &c.lr, "Adam learning rate").range(1e-9, 10);
  s.bind("learner.rounds", &c.rounds,
         "rounds at most: each round learns from one trajectory per observer (reinforce: until each of its envs "
         "has ended an episode; ppo: ppo.steps steps per env) while the observers wait; appo and impala: one "
         "round is one learner step over async.batch trajectories, the observers acting on")
      .range(1, 100000000);
  s.rename("learner.episodes", "learner.rounds");  // its name until issue 35: it always counted rounds
  s.bind("learner.max_steps", &c.max_steps,
         "steps per episode at most: the observers truncate longer episodes (the env's own limit still "
         "applies), and --eval plays that many at most")
      .range(1, 100000000);
  s.bind("learner.target_reward", &c.target_reward, "stop as solved when the running reward reaches this");
  s.bind("learner.learn", &c.learn, "false: act only (benchmarks)");
  s.bind("learner.log_interval", &c.log_interval, "rounds between progress lines").range(1, 100000000);
  s.bind("learner.checkpoint_every", &c.checkpoint_every, "rounds between checkpoints; 0: at the end only")
      .range(0, 100000000);
  s.bind("ppo.steps", &c.ppo_steps, "steps per env in each observer's trajectory per round").range(1, 1000000);
  s.bind("ppo.epochs", &c.ppo.epochs, "passes over each round's data").range(1, 1000);
  s.bind("ppo.minibatch", &c.ppo.minibatch, "transitions per gradient step").range(1, 10000000);
  s.bind("ppo.clip", &c.ppo.clip, "surrogate ratio clip").range(0.0, 10.0);
  s.bind("ppo.lambda", &c.ppo.lambda, "GAE lambda").range(0.0, 1.0);
  s.bind("ppo.vf_coef", &c.ppo.vf_coef, "value loss weight").range(0.0, 100.0);
  s.bind("ppo.ent_coef", &c.ppo.ent_coef, "entropy bonus weight").range(0.0, 10.0);
  s.bind("ppo.value_clip", &c.ppo.value_clip, "clip the value update to +-this (0: off)").range(0.0, 1e9);
  s.bind("ppo.max_grad_norm", &c.ppo.max_grad_norm, "gradient norm clip").range(1e-6, 1e9);
  s.bind("ppo.norm_obs", &c.ppo.norm_obs, "normalise observations with running statistics");
  s.bind("ppo.norm_reward", &c.ppo.norm_reward, "scale rewards by the running std of the discounted return");
  s.bind("ppo.log_std_init", &c.ppo_log_std_init, "continuous actions: initial log standard deviation")
      .range(-10.0, 5.0);
  s.bind("ppo.solved_window", &c.solved_window,
         "solved when the mean return of the last N episodes reaches "
         "learner.target_reward")
      .range(1, 100000);
  s.bind("learner.device", &c.learner_device,
         "appo/impala: where the learner trains its copy of the network: cpu, cuda or cuda:N (empty: agent.device); "
         "inference stays on agent.device and takes each new version across");
}

// roles.*, launch.*, async.* and vtrace.* (APPO/IMPALA).
void bind_roles_and_async(Settings& s, RlConfig& c) {
  s.bind("roles.learners", &c.learners,
         "appo/impala: 1 runs the learner in its own process (distrl-learner, the world's last rank: on "
         "another host with --nnodes, on learner.device there); 0 runs it in the agent")
      .range(0, 1);
  s.bind("roles.agents", &c.agents,
         "with roles.learners 1: agents (inference servers, ranks 0..N-1), each serving its share of the "
         "observers (observer rank r: agent (r - N) mod N) and sending its batches to the one learner; "
         "agent k > 0 writes its outputs under OUT_DIR/agentK")
      .range(1, 64);
  s.bind("launch.max_restarts", &c.max_restarts,
         "distrl-launch restarts a rank that dies up to this many times: a learner process resumes from "
         "OUT_DIR/learner.pt and the agent goes on acting meanwhile (meant for roles.learners 1: a restarted "
         "observer is not taken back into the run)")
      .range(0, 1000);
  s.bind("async.rollout", &c.async.rollout, "appo/impala: steps per env in one trajectory").range(1, 100000);
  s.bind("async.batch", &c.async.batch,
         "appo/impala: trajectories per learner step (0: one per observer, which keeps the policy lag near one "
         "version)")
      .range(0, 100000);
  s.bind("async.queue", &c.async.queue,
         "appo/impala: trajectories waiting for the learner at most (0: one batch); when full, acting waits "
         "(back-pressure); each batch more adds about one version of lag")
      .range(0, 1000000);
  s.bind("async.max_lag", &c.async.max_lag,
         "appo/impala: trajectories acted more than this many policy versions ago are dropped (counted)")
      .range(0, 1000000000);
  s.bind("vtrace.lambda", &c.async.lambda, "V-trace's lambda (1: the paper's plain traces)").range(0.0, 1.0);
  s.bind("vtrace.rho_bar", &c.async.rho_bar, "V-trace: clip of the importance weight in the value targets")
      .range(1e-6, 1e9);
  s.bind("vtrace.c_bar", &c.async.c_bar, "V-trace: clip of the traces").range(1e-6, 1e9);
  s.bind("vtrace.pg_rho_bar", &c.async.pg_rho_bar, "impala: clip of the importance weight on the policy gradient")
      .range(1e-6, 1e9);
}

// rpc.*.
void bind_rpc(Settings& s, RlConfig& c) {
  s.bind("rpc.transport", &c.transport, transport::kTransportHelp).choices(transport::transport_choices());
  s.bind("rpc.timeout_s", &c.rpc_timeout_s, "per-call timeout; also how long an observer waits for a silent agent")
      .range(0.1, 86400);
  s.bind("rpc.threads", &c.rpc_threads, "RPC handler threads per process").range(1, 256);
  s.bind("rpc.shm_spin_us", &c.shm_spin_us,
         "shared memory: the most a waiter spins before it sleeps (adaptive; 0: sleep at once)")
      .range(0, 100000);
}

}  // namespace

// The keys in the order --help lists them.
void bind(Settings& s, RlConfig& c) {
  s.bind("workload", &c.workload,
         "rl: an agent (rank 0), `observers` observer processes and, with roles.learners 1, a learner process; "
         "a file without the key is read as rl (the agent says so: add `workload: rl`)")
      .choices({"rl"});
  bind_run_and_env(s, c);
  bind_agent_and_model(s, c);
  bind_learning(s, c);
  bind_roles_and_async(s, c);
  bind_rpc(s, c);
}

transport::RpcOptions rpc_options(const RlConfig& c, const WorldFlags& w, const std::string& name) {
  transport::RpcOptions o =
      transport::rank_options(w.rank, w.world_size, w.resolved_init_method(),
                              std::chrono::milliseconds(static_cast<long long>(c.rpc_timeout_s * 1000)), c.transport);
  o.name = name;
  o.num_worker_threads = c.rpc_threads;
  o.shm_spin = std::chrono::microseconds(c.shm_spin_us);
  return o;
}

void prepare_env(RlConfig& c) {
  if (!c.env_plugin.empty()) {
    c.env_plugin = std::filesystem::absolute(c.env_plugin).lexically_normal().string();  // never a library search
    envs::load_env_plugin(c.env_plugin);
  }
  const auto names = envs::env_names();
  if (std::find(names.begin(), names.end(), c.env) != names.end()) return;
  if (const auto id = envs::gymnasium_id(c.env); id && !id->empty()) return;
  std::string known;
  for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("env.name: '" + c.env + "' is not one of: " + known +
                    (c.env_plugin.empty()
                         ? " (an environment of your own: env.plugin, envs/plugin.h; Gymnasium's: gymnasium:ID)"
                         : " (" + c.env_plugin + " adds none by that name)"));
}

}  // namespace distrl::rl
