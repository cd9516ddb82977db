// distrl-bench learner: the learners' own cost, in this process with no observers: each config's
// algorithm is built as distrl-agent builds it, fed batches of real transitions (its env played
// by its own policy: PPO fragments as run_fragment makes them, APPO/IMPALA trajectories as
// streaming observers send them), and timed per update: forward, backward, optimizer and the
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
#include "observer/observer.h"
#include "rl/rl_config.h"
#include "tools/bench.h"

namespace distrl::tools {

namespace {

// The batches one update takes, played by the actor with autoresetting envs, one batch at a time
// (acting is never timed: a streaming observer's loop on its own thread waits while the learner
// updates).
class Feeder {
 public:
  Feeder(const rl::RlConfig& cfg, agent::Actor& actor, int obs_dim, int act_dim)
      : cfg_(cfg), actor_(actor), venv_(cfg.env, cfg.envs_per_observer, static_cast<std::uint64_t>(cfg.seed), true) {
    agent::TrajectoryOptions o;
    o.observers = 1;
    o.envs = cfg.envs_per_observer;
    o.obs_dim = obs_dim;
    o.act_dim = act_dim;
    o.rollout = cfg.async.rollout;
    o.queue = 1 << 20;
    intake_ = std::make_unique<agent::Trajectories>(o);
  }
  ~Feeder() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      stopping_ = true;
    }
    cv_.notify_all();
    if (stream_.joinable()) stream_.join();
  }

  std::vector<rl::Fragment> fragments() {  // PPO: one fragment per observer
    std::vector<rl::Fragment> out;
    const observer::ActFn act = [&](const std::vector<float>& obs) {
      return actor_.act(obs.data(), static_cast<int>(obs.size()) / venv_.obs_dim());
    };
    for (int o = 0; o < cfg_.observers; ++o)
      out.push_back(observer::run_fragment(venv_, state_, o, cfg_.ppo_steps, act, false));
    return out;
  }

  std::vector<rl::Fragment> trajectories() {  // APPO/IMPALA: async.batch of them
    {
      std::lock_guard<std::mutex> lock(mu_);
      want_ += cfg_.async.batch;
    }
    cv_.notify_all();
    if (!stream_.joinable()) stream_ = std::thread([this] { play(); });
    auto batch = intake_->pop(cfg_.async.batch, std::chrono::minutes(5));
    if (static_cast<int>(batch.size()) != cfg_.async.batch) throw Error("distrl-bench learner: the envs stalled");
    return batch;
  }

 private:
  void play() {
    const observer::StepFn step = [&](const rl::StepReport& r) {
      intake_->observe(r);
      rl::ActReply reply = actor_.act(r.obs.data(), static_cast<int>(r.obs.size()) / venv_.obs_dim());
      intake_->acted(0, reply);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || intake_->stats().queued < want_; });
      return reply;
    };
    observer::run_stream(venv_, 0, step, stopping_);
  }

  const rl::RlConfig& cfg_;
  agent::Actor& actor_;
  envs::VecEnv venv_;
  observer::FragmentState state_;
  std::unique_ptr<agent::Trajectories> intake_;
  std::mutex mu_;
  std::condition_variable cv_;
  long long want_ = 0;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};
  std::thread stream_;
};

}  // namespace

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
    Feeder feed(cfg, *algo.actor, obs_dim, act_dim);
    long long rows = 0;
    agent::LearnerTimes before;
    for (int u = 0; u < opt.warmup + opt.updates; ++u) {
      if (u == opt.warmup) before = algo.learner->times();
      auto batch = cfg.asynchronous() ? feed.trajectories() : feed.fragments();
      long long n = 0;
      for (const auto& f : batch) n += static_cast<long long>(f.transitions());
      if (u >= opt.warmup) rows += n;
      if (auto* a = dynamic_cast<agent::AsyncLearner*>(algo.learner.get())) a->update(std::move(batch));
      else dynamic_cast<agent::Ppo&>(*algo.learner).update(batch);
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
  std::printf("per gradient step: forward (the loss included), backward, optimizer (clip + step), the rest (advantages "
              "or V-trace, tensors, statistics); us/env-step: the update's whole time per transition learned\n");
  std::cout << "wrote " << opt.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
