#include "agent/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/output_file.h"
#include "envs/env.h"

namespace distrl::agent {

void print_banner(const rl::RlConfig& cfg, const std::string& security) {
  const std::string mode = cfg.mode == "batched" ? "batched (max_batch " + std::to_string(cfg.max_batch) +
                                                       ", max_wait " + std::to_string(cfg.max_wait_us) + " us)"
                                                 : "unbatched";
  const std::string algo = cfg.algo == "ppo"    ? "ppo (actor-critic)"
                           : cfg.asynchronous() ? cfg.algo + " (asynchronous actor-critic, V-trace)"
                                                : "reinforce, model " + cfg.model;
  std::printf("distrl-agent: %s, %s, %s, device %s, lr %g, gamma %g%s\n", cfg.env.c_str(), mode.c_str(), algo.c_str(),
              cfg.device.c_str(), cfg.lr, cfg.gamma,
              security == "curve" ? "; security curve (every socket authenticated and encrypted)" : "");
  std::fflush(stdout);
}

void print_joined(const rl::RlConfig& cfg, int observers) {
  if (cfg.asynchronous())
    std::printf(
        "distrl-agent: %d observer(s)%s joined; they act on their own while the learner runs up to %d steps "
        "of %d trajectories of %d steps x %d env(s)\n",
        observers, cfg.learners > 0 ? " and 1 learner process" : "", cfg.rounds,
        cfg.async.batch > 0 ? cfg.async.batch : observers, cfg.async.rollout, cfg.envs_per_observer);
  else if (cfg.algo == "ppo")
    std::printf("distrl-agent: %d observer(s) joined; running up to %d rounds of %d steps x %d env(s) per observer\n",
                observers, cfg.rounds, cfg.ppo_steps, cfg.envs_per_observer);
  else
    std::printf("distrl-agent: %d observer(s) joined; running up to %d rounds of episodes of at most %d steps\n",
                observers, cfg.rounds, cfg.max_steps);
  std::fflush(stdout);
}

void write_run_report(const rl::RlConfig& cfg, const RunSummary& s, int observers, const std::string& config_yaml,
                      run::RunOutputs& out) {
  out.write_config(config_yaml);
  std::ostringstream sum;
  sum << "observers,mode,envs_per_observer,rounds,episodes,env_steps,seconds,env_steps_per_s,latency_median_us,"
         "latency_p99_us,mean_batch,running_reward,solved,observers_lost,agent_cpu_us_per_request,"
         "observer_cpu_us_per_request,observers_readmitted,latency_mean_us,queue_wait_us,forward_us,"
         "forward_us_per_row\n"
      << observers << ',' << cfg.mode << ',' << cfg.envs_per_observer << ',' << s.rounds << ',' << s.episodes << ','
      << s.env_steps << ',' << s.seconds << ',' << s.steps_per_second() << ',' << s.latency_median_us << ','
      << s.latency_p99_us << ',' << s.mean_batch << ',' << s.running_reward << ',' << (s.solved ? 1 : 0) << ','
      << s.observers_lost << ',' << s.agent_cpu_us_per_request << ',' << s.observer_cpu_us_per_request << ','
      << s.observers_readmitted << ',' << s.latency_mean_us << ',' << s.queue_wait_us << ',' << s.forward_us << ','
      << s.forward_us_per_row << '\n';
  write_file_atomically(cfg.out_dir + "/summary.csv", sum.str());
  std::printf("%s after %d rounds (%lld episodes, %lld env steps) in %.1f s: %s\n", s.solved ? "Solved" : "Stopped",
              s.rounds, s.episodes, s.env_steps, s.seconds, s.stop_reason.c_str());
  std::printf("  env-steps/s %.0f, act round trip median %.1f us, p99 %.1f us, mean batch %.2f rows\n",
              s.steps_per_second(), s.latency_median_us, s.latency_p99_us, s.mean_batch);
  std::printf(
      "  round trip mean %.1f us = queue wait %.1f + forward %.1f (%.2f us per row) + transport and reply "
      "%.1f\n",
      s.latency_mean_us, s.queue_wait_us, s.forward_us, s.forward_us_per_row,
      s.latency_mean_us - s.queue_wait_us - s.forward_us);
  std::printf("  CPU per act request: agent %.1f us (serving), observer %.1f us (env step included)\n",
              s.agent_cpu_us_per_request, s.observer_cpu_us_per_request);
  if (s.asynchronous)
    std::printf(
        "  trajectories: %lld queued, %lld dropped (older than async.max_lag, or while the learner process "
        "was unreachable), %lld malformed steps refused; "
        "they waited %.1f s in all for room in the queue (back-pressure: the learner the slower side)\n",
        s.trajectories, s.dropped_stale, s.refused, s.backpressure_s);
  if (const LearnerTimes& t = s.learner; t.updates > 0 && t.steps > 0) {
    const double ms = 1000.0 / static_cast<double>(t.steps);
    std::printf(
        "  learner: %lld updates in %.1f s, %.2f ms per gradient step of %.0f rows = forward %.2f + backward %.2f "
        "+ optimizer %.2f + the rest %.2f (targets, tensors, statistics)\n",
        t.updates, t.total_s, t.total_s * ms, static_cast<double>(t.rows) / static_cast<double>(t.steps),
        t.forward_s * ms, t.backward_s * ms, t.optimizer_s * ms,
        (t.total_s - t.forward_s - t.backward_s - t.optimizer_s) * ms);
  }
  out.close();
  const bool plotted =
      s.rounds > 1 &&
      out.plot({{"episode reward",
                 "round",
                 {{"round", "running_reward", "running reward"}, {"round", "mean_reward", "mean of the round"}}}});
  std::printf("  outputs: %s/{metrics.csv,summary.csv,config.yaml%s%s}\n", cfg.out_dir.c_str(),
              cfg.learn ? ",policy.pt" : "", plotted ? ",learning_curve.png" : "");
  if (const std::string line = out.tensorboard_line(); !line.empty()) std::printf("  %s\n", line.c_str());
}

void print_evaluation(const rl::RlConfig& cfg, const std::vector<double>& r, double seconds,
                      const std::string& render) {
  if (!render.empty()) std::printf("distrl-agent --eval: the first episode is in %s\n", render.c_str());
  double mean = 0, var = 0;
  for (double x : r) mean += x / r.size();
  for (double x : r) var += (x - mean) * (x - mean) / r.size();
  const float threshold = envs::make_env(cfg.env)->reward_threshold();
  std::printf(
      "distrl-agent --eval: %s, %d episodes: mean return %.1f +- %.1f (min %.1f, max %.1f) in %.1f s; "
      "the env's solved threshold %.1f %s\n",
      cfg.env.c_str(), static_cast<int>(r.size()), mean, std::sqrt(var), *std::min_element(r.begin(), r.end()),
      *std::max_element(r.begin(), r.end()), seconds, threshold, mean >= threshold ? "reached" : "not reached");
}

}  // namespace distrl::agent
