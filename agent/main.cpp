// distrl-agent: owns the policy, serves observers' select_action requests (batched or one by
// one) and learns from their episodes. Rank 0 of an RL run; see README "Running RL".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <ATen/Parallel.h>

#include "rl/cli.h"
#include "agent/policy_actor.h"
#include "agent/rl_agent.h"
#include "common/log.h"
#include "common/main_guard.h"
#include "common/output_file.h"
#include "common/stop_signal.h"
#include "envs/env.h"
#include "common/plot.h"
#include "transport/security.h"

namespace {
distrl::agent::RlAgent* g_agent = nullptr;
extern "C" void on_usr1(int) {
  if (g_agent) g_agent->request_checkpoint();
}
}  // namespace

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-agent", [&] {
    using namespace distrl;
    rl::RlCommandLine cmd(
        "distrl-agent",
        "distrl-agent: the RL agent. Owns the policy network, answers select_action requests from\n"
        "the observers (batched into one forward pass, or one by one), learns with REINFORCE\n"
        "(episodes) or PPO (rollout fragments), and prints progress until the running reward reaches\n"
        "learner.target_reward. Writes OUT_DIR/metrics.csv, OUT_DIR/summary.csv, OUT_DIR/config.yaml,\n"
        "OUT_DIR/learning_curve.png and OUT_DIR/policy.pt (also on SIGUSR1). SIGINT/SIGTERM: finishes the\n"
        "round, saves and writes all of these, then exits 130/143 (a second signal ends it at once).\n"
        "Usually started by: distrl-launch --config configs/cartpole.yaml\n"
        "Evaluation, alone: distrl-agent --config F --eval --checkpoint OUT_DIR/policy.pt --episodes 100");
    bool eval = false;
    std::string checkpoint;
    int eval_episodes = 100;
    cmd.app.add_flag("--eval", eval, "play --episodes episodes in this process with --checkpoint's policy and report "
                                     "mean +- std return (PPO: the most likely action)");
    cmd.app.add_option("--checkpoint", checkpoint, "--eval: the policy to evaluate (OUT_DIR/policy.pt)");
    cmd.app.add_option("--episodes", eval_episodes, "--eval: episodes to play")->check(CLI::Range(1, 1000000));
    std::string render;
    cmd.app.add_option("--render", render, "--eval: write the first episode as an animated GIF to this file");
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    const rl::RlConfig& cfg = cmd.config;
    const ToolFlags& cli = cmd.flags;
    agent::parse_device(cfg.device);  // fail before rendezvous, not after
    if (cli.check_only) return 0;
    if (eval) {
      if (checkpoint.empty()) throw ConfigError("--eval needs --checkpoint FILE (e.g. " + cfg.out_dir + "/policy.pt)");
      agent::RlAgent rl(cfg, checkpoint);
      const auto start = std::chrono::steady_clock::now();
      const auto r = rl.evaluate(eval_episodes, static_cast<std::uint64_t>(cfg.seed) * 7919 + 1000003, render);
      if (!render.empty()) std::printf("distrl-agent --eval: the first episode is in %s\n", render.c_str());
      double mean = 0, var = 0;
      for (double x : r) mean += x / r.size();
      for (double x : r) var += (x - mean) * (x - mean) / r.size();
      const float threshold = envs::make_env(cfg.env)->reward_threshold();
      std::printf("distrl-agent --eval: %s, %d episodes: mean return %.1f +- %.1f (min %.1f, max %.1f) in %.1f s; "
                  "the env's solved threshold %.1f %s\n",
                  cfg.env.c_str(), eval_episodes, mean, std::sqrt(var), *std::min_element(r.begin(), r.end()),
                  *std::max_element(r.begin(), r.end()),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), threshold,
                  mean >= threshold ? "reached" : "not reached");
      return 0;
    }

    set_log_tag("agent");
    agent::RlAgent rl(cfg, cli.resume);
    g_agent = &rl;
    std::signal(SIGUSR1, on_usr1);
    std::printf("distrl-agent: %s, %s, %s, device %s, lr %g, gamma %g\n", cfg.env.c_str(),
                cfg.mode == "batched" ? ("batched (max_batch " + std::to_string(cfg.max_batch) + ", max_wait " +
                                         std::to_string(cfg.max_wait_us) + " us)").c_str()
                                      : "unbatched",
                cfg.algo == "ppo" ? "ppo (actor-critic)" : ("reinforce, model " + cfg.model).c_str(), cfg.device.c_str(),
                cfg.lr, cfg.gamma);
    std::fflush(stdout);
    transport::RpcOptions ro = rl::rpc_options(cfg, cli.world, rl::kAgentName);
    ro.thread_init = [] { at::init_num_threads(); };  // agent.torch_threads on the threads that serve
    transport::RpcAgent rpc(ro, [&](transport::RpcAgent& a) { rl.serve(a); });
    if (cfg.algo == "ppo")
      std::printf("distrl-agent: %d observer(s) joined; running up to %d rounds of %d steps x %d env(s) per observer\n",
                  rpc.world_size() - 1, cfg.episodes, cfg.ppo_steps, cfg.envs_per_observer);
    else
      std::printf("distrl-agent: %d observer(s) joined; running up to %d rounds of episodes of at most %d steps\n",
                  rpc.world_size() - 1, cfg.episodes, cfg.max_steps);
    std::fflush(stdout);
    // SIGINT/SIGTERM from here on: finish the round, save, write every output, exit 130/143.
    install_stop_handlers();
    agent::RunSummary s = rl.run(rpc);
    g_agent = nullptr;
    rpc.shutdown();

    write_file_atomically(cfg.out_dir + "/config.yaml", cmd.settings.to_yaml());
    std::ostringstream sum;
    sum << "observers,mode,envs_per_observer,rounds,episodes,env_steps,seconds,env_steps_per_s,latency_median_us,"
           "latency_p99_us,mean_batch,running_reward,solved,observers_lost,agent_cpu_us_per_request,"
           "observer_cpu_us_per_request,observers_readmitted\n"
        << rpc.world_size() - 1 << ',' << cfg.mode << ',' << cfg.envs_per_observer << ',' << s.rounds << ','
        << s.episodes << ',' << s.env_steps << ',' << s.seconds << ',' << s.steps_per_second() << ','
        << s.latency_median_us << ',' << s.latency_p99_us << ',' << s.mean_batch << ',' << s.running_reward << ','
        << (s.solved ? 1 : 0) << ',' << s.observers_lost << ',' << s.agent_cpu_us_per_request << ','
        << s.observer_cpu_us_per_request << ',' << s.observers_readmitted << '\n';
    write_file_atomically(cfg.out_dir + "/summary.csv", sum.str());
    std::printf("%s after %d rounds (%lld episodes, %lld env steps) in %.1f s: %s\n",
                s.solved ? "Solved" : "Stopped", s.rounds, s.episodes, s.env_steps, s.seconds, s.stop_reason.c_str());
    std::printf("  env-steps/s %.0f, select_action round trip median %.1f us, p99 %.1f us, mean batch %.2f rows\n",
                s.steps_per_second(), s.latency_median_us, s.latency_p99_us, s.mean_batch);
    std::printf("  CPU per select_action request: agent %.1f us (serving), observer %.1f us (env step included)\n",
                s.agent_cpu_us_per_request, s.observer_cpu_us_per_request);
    const bool plotted = s.rounds > 1 && plot_csv(cfg.out_dir + "/metrics.csv", cfg.out_dir + "/learning_curve.png",
                                                   {{"episode reward", "round",
                                                     {{"round", "running_reward", "running reward"},
                                                      {"round", "mean_reward", "mean of the round"}}}});
    std::printf("  outputs: %s/{metrics.csv,summary.csv,config.yaml%s%s}\n", cfg.out_dir.c_str(),
                cfg.learn ? ",policy.pt" : "", plotted ? ",learning_curve.png" : "");
    if (!s.failure.empty()) throw TransportError(s.failure);  // exit 1, after every output is written
    return stop_exit_code();  // 0, or 128 + the signal that stopped the run
  });
}
