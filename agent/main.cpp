// distrl-agent: owns the policy, serves observers' act requests (batched or one by
// one) and learns from their episodes. Rank 0 of an RL run; see docs/rl.md.
#include <chrono>
#include <filesystem>
#include <csignal>
#include <iostream>
#include <thread>

#include <ATen/Parallel.h>

#include "rl/cli.h"
#include "agent/rl_agent.h"
#include "agent/run_report.h"
#include "common/run_dir.h"
#include "common/run_lock.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/main_guard.h"
#include "common/stop_signal.h"
#include "run/workload_catalog.h"
#include "transport/bootstrap/rendezvous.h"
#include "transport/bootstrap/security.h"

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
        "distrl-agent: the RL agent. Owns the policy network, answers act requests from\n"
        "the observers (batched into one forward pass, or one by one), learns from their steps with\n"
        "REINFORCE, PPO, APPO or IMPALA, and prints progress until the running reward reaches\n"
        "learner.target_reward. Writes OUT_DIR/metrics.csv, OUT_DIR/summary.csv, OUT_DIR/config.yaml,\n"
        "OUT_DIR/learning_curve.png and OUT_DIR/policy.pt (also on SIGUSR1). SIGINT/SIGTERM: finishes the\n"
        "round, saves and writes all of these, then exits 130/143 (a second signal ends it at once).\n"
        "Usually started by: distrl-launch --config configs/cartpole.yaml\n"
        "Evaluation, alone: distrl-agent --config F --eval --checkpoint OUT_DIR/policy.pt --episodes 100");
    bool eval = false;
    std::string checkpoint;
    int eval_episodes = 100;
    cmd.app.add_flag("--eval", eval,
                     "play --episodes episodes in this process with --checkpoint's policy and report "
                     "mean +- std return (PPO: the most likely action)");
    cmd.app.add_option("--checkpoint", checkpoint, "--eval: the policy to evaluate (OUT_DIR/policy.pt)");
    cmd.app.add_option("--episodes", eval_episodes, "--eval: episodes to play")->check(CLI::Range(1, 1000000));
    std::string render;
    cmd.app.add_option("--render", render, "--eval: write the first episode as an animated GIF to this file");
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    const rl::RlConfig& cfg = cmd.config;
    const ToolFlags& cli = cmd.flags;
    agent::check_device(cfg.device);  // fail before rendezvous, not after
    // learner.device is the learner process's with roles.learners 1 (it checks it on its host).
    if (!cfg.learner_device.empty() && cfg.learners == 0) agent::check_device(cfg.learner_device, "learner.device");
    if (cli.check_only) {
      // The env (Gymnasium knows its IDs: asked here), the algorithm for it (REINFORCE cannot
      // drive continuous actions), a checkpoint that does not fit or has no rounds left; then the
      // run directory: a live run writes there, or it holds another run's outputs.
      try {
        agent::RlAgent(cfg, cli.resume);
      } catch (const EnvError& e) {
        throw ConfigError(std::string("env.name: ") + e.what());
      }
      RunLock::check_before_start(cfg.out_dir);
      const run::Roles roles =
          run::find_workload_entry(run::kRlWorkload, "distrl-agent").roles([&](const std::string& key) {
            return cmd.settings.value(key);
          });
      std::cout << run::check_line("distrl-agent", run::kRlWorkload, roles,
                                   cfg.env + ", " + cfg.algo + ", " + cfg.mode +
                                       (cmd.flags.security == "curve" ? ", security curve" : ""),
                                   cfg.out_dir)
                << std::endl;
      return 0;
    }
    if (eval) {
      if (checkpoint.empty()) throw ConfigError("--eval needs --checkpoint FILE (e.g. " + cfg.out_dir + "/policy.pt)");
      agent::RlAgent rl(cfg, checkpoint, agent::RlAgent::Load::Evaluate);
      const auto start = std::chrono::steady_clock::now();
      const auto r = rl.evaluate(eval_episodes, static_cast<std::uint64_t>(cfg.seed) * 7919 + 1000003, render);
      agent::print_evaluation(cfg, r, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                              render);
      return 0;
    }

    // Which agent this is (roles.agents: ranks 0..N-1); agent k > 0 writes under OUT_DIR/agentK.
    transport::RpcOptions ro = rl::rpc_options(cfg, cli.world, "");
    const int rank = transport::resolve_world(ro.init_method, ro.rank, ro.world_size).rank;
    if (rank >= cfg.agents)
      throw ConfigError("distrl-agent was started as rank " + std::to_string(rank) + ", but the agents are ranks 0.." +
                        std::to_string(cfg.agents - 1) +
                        " (roles.agents); the ranks after them are the observers' "
                        "(distrl-observer) and the learner's (distrl-learner)");
    ro.name = rl::agent_name(rank);
    rl::RlConfig mine = cfg;
    std::string resume = cli.resume;
    if (rank > 0) {
      mine.out_dir = cfg.out_dir + "/agent" + std::to_string(rank);
      // --resume names agent 0's checkpoint (OUT_DIR/policy.pt); agent k resumes from its own,
      // the file of that name in OUT_DIR/agentK (the learner process from OUT_DIR/learner.pt).
      if (!resume.empty()) resume = mine.out_dir + "/" + std::filesystem::path(resume).filename().string();
    }
    set_log_tag(ro.name);
    agent::RlAgent rl(mine, resume);
    run::RunOutputs outputs(mine.out_dir, /*lead=*/true, mine.tensorboard);  // claims OUT_DIR: nothing written before
    g_agent = &rl;
    std::signal(SIGUSR1, on_usr1);
    agent::print_banner(mine, cli.security);
    ro.thread_init = [] { at::init_num_threads(); };  // agent.torch_threads on the threads that serve
    transport::RpcAgent rpc(ro, [&](transport::RpcAgent& a) { rl.serve(a); });
    const int observers = rl.observers();
    agent::print_joined(mine, observers);
    // SIGINT/SIGTERM from here on: finish the round, save, write every output, exit 130/143.
    install_stop_handlers();
    if (failpoint("agent.hold_before_run"))  // tests: a world that has joined, with no run yet
      while (!stop_signal()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    agent::RunSummary s = rl.run(rpc, outputs);
    g_agent = nullptr;
    rpc.shutdown();
    agent::write_run_report(mine, s, observers, cmd.settings.to_yaml(), outputs);
    if (!s.failure.empty()) throw TransportError(s.failure);  // exit 1, after every output is written
    return stop_exit_code();                                  // 0, or 128 + the signal that stopped the run
  });
}
