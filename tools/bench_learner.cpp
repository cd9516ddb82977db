// distrl-bench learner: the learners' own cost, in this process with no observers: each config's
// algorithm is built as distrl-agent builds it, fed batches of real transitions (its env played
// by its own policy through an observer's loop in this process: tools/local_observer.h), and
// timed per update: forward, backward, optimizer and the
// rest, per gradient step and per env step learned. Acting is not timed.
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <thread>

#include "agent/async_learner.h"
#include "agent/ppo.h"
#include "agent/trajectories.h"
#include "common/error.h"
#include "common/settings.h"
#include "envs/env.h"
#include "envs/vec_env.h"
#include "models/torch_threads.h"
#include "rl/rl_config.h"
#include "tools/bench.h"
#include "tools/local_observer.h"

namespace distrl::tools {

int run_learner_bench(const LearnerBenchOptions& opt) {
  std::ofstream csv = open_csv(opt.csv);
  csv << "config,algo,env,updates,rows_per_update,gradient_steps_per_update,rows_per_step,ms_per_update,ms_per_step,"
         "forward_ms,backward_ms,optimizer_ms,rest_ms,us_per_env_step\n";
  std::printf("%-28s %-7s %8s %9s %9s %8s %8s %8s %8s %10s\n", "config", "algo", "rows", "ms/update", "ms/step",
              "forward", "backward", "optim", "rest", "us/env-step");
  for (const auto& path : opt.configs) {
    rl::RlConfig cfg;
    Settings s("distrl-bench");
    rl::bind(s, cfg);
    std::string security;  // the config's transport security: nothing is sent here
    s.bind("security", &security, "unused here");
    s.load_file(find_config(path, "--configs"));
    s.apply_overrides(opt.overrides);
    rl::prepare_env(cfg);
    if (cfg.algo == "reinforce") throw ConfigError(path + ": distrl-bench learner measures the actor-critic learners");
    models::set_torch_threads(cfg.torch_threads);
    const auto env = envs::make_env(cfg.env);
    const auto space = env->action_space();
    const int obs_dim = env->observation_space().dim();
    const int act_dim = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
    auto algo = agent::make_algorithm(cfg, obs_dim, act_dim > 0 ? 0 : space.n, act_dim);
    algo.learner->set_observers(cfg.observers);
    if (cfg.async.batch == 0) cfg.async.batch = cfg.observers;  // as the learner resolved it: one per observer
    agent::TrajectoryOptions shape;
    shape.envs = cfg.envs_per_observer;
    shape.obs_dim = obs_dim;
    shape.act_dim = act_dim;
    shape.rollout = cfg.asynchronous() ? cfg.async.rollout : cfg.ppo_steps;
    LocalObserver feed(cfg.env, static_cast<std::uint64_t>(cfg.seed), *algo.actor, shape);
    long long rows = 0;
    agent::LearnerTimes before;
    for (int u = 0; u < opt.warmup + opt.updates; ++u) {
      if (u == opt.warmup) before = algo.learner->times();
      auto batch = feed.next(cfg.asynchronous() ? cfg.async.batch : cfg.observers);
      long long n = 0;
      for (const auto& f : batch) n += static_cast<long long>(f.transitions());
      if (u >= opt.warmup) rows += n;
      if (auto* a = dynamic_cast<agent::AsyncLearner*>(algo.learner.get())) a->update(std::move(batch));
      else {
        auto& ppo = dynamic_cast<agent::Ppo&>(*algo.learner);
        for (auto& f : batch) ppo.bootstrap(f);
        ppo.update(batch);
      }
    }
    agent::LearnerTimes t = algo.learner->times();
    t.updates -= before.updates;
    t.steps -= before.steps;
    t.rows -= before.rows;
    t.forward_s -= before.forward_s;
    t.backward_s -= before.backward_s;
    t.optimizer_s -= before.optimizer_s;
    t.total_s -= before.total_s;
    const double per_step = 1000.0 / static_cast<double>(std::max<long long>(1, t.steps));
    const double rest = t.total_s - t.forward_s - t.backward_s - t.optimizer_s;
    const std::string name = path.substr(path.find_last_of('/') + 1);
    std::printf("%-28s %-7s %8lld %9.2f %9.3f %8.3f %8.3f %8.3f %8.3f %10.3f\n", name.c_str(), cfg.algo.c_str(),
                rows / std::max<long long>(1, t.updates), t.total_s * 1000.0 / t.updates, t.total_s * per_step,
                t.forward_s * per_step, t.backward_s * per_step, t.optimizer_s * per_step, rest * per_step,
                t.total_s * 1e6 / static_cast<double>(rows));
    csv << name << ',' << cfg.algo << ',' << cfg.env << ',' << t.updates << ',' << rows / t.updates << ','
        << static_cast<double>(t.steps) / t.updates << ',' << static_cast<double>(t.rows) / t.steps << ','
        << t.total_s * 1000.0 / t.updates << ',' << t.total_s * per_step << ',' << t.forward_s * per_step << ','
        << t.backward_s * per_step << ',' << t.optimizer_s * per_step << ',' << rest * per_step << ','
        << t.total_s * 1e6 / static_cast<double>(rows) << '\n';
  }
  std::printf(
      "per gradient step: forward (the loss included), backward, optimizer (clip + step), the rest (advantages "
      "or V-trace, tensors, statistics); us/env-step: the update's whole time per transition learned\n");
  std::cout << "wrote " << opt.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
