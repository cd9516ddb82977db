// distrl-learner: APPO / IMPALA's learner in its own process (roles.learners: 1), the RL world's
// last rank. The agent sends it batches of trajectories (rl::kLearn); it learns each (V-trace,
// the loss, an optimizer step: AsyncLearner::update on learner.device) and answers with the
// new weights, which the agent installs for inference. It writes OUT_DIR/learner.pt (network,
// optimizer, observation statistics, policy version) every learner.checkpoint_every steps and
// at the end, and starts from it when it is there: a restarted learner (launch.max_restarts)
// or a --resume'd run goes on from its last checkpoint. Exits when the agent ends the run.
//
// Several agents (roles.agents) may feed it: their batches take turns, each reply carries the
// newest weights, and a dead agent is named while the learner goes on with the others.
//
// Threads: the RPC pool runs kLearn and kWeights, one at a time under `mu`; main waits for every
// agent's shutdown.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "agent/async_learner.h"
#include "common/log.h"
#include "common/main_guard.h"
#include "common/stop_signal.h"
#include "envs/env.h"
#include "models/torch_threads.h"
#include "rl/cli.h"
#include "transport/security.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-learner", [&] {
    using namespace distrl;
    rl::RlCommandLine cmd(
        "distrl-learner",
        "distrl-learner: APPO / IMPALA's learner in its own process (roles.learners: 1, the world's last\n"
        "rank). Learns the batches of trajectories the agent sends (V-trace, one optimizer step each) on\n"
        "learner.device and answers with the new weights. Writes OUT_DIR/learner.pt every\n"
        "learner.checkpoint_every steps and at the end, and goes on from it when it is there (a restart\n"
        "under launch.max_restarts, or --resume). Takes the same --config and overrides as distrl-agent.\n"
        "Usually started by: distrl-launch --config configs/cartpole_appo.yaml roles.learners=1");
    if (!cmd.parse(argc, argv)) return 0;
    transport::use_security(cmd.flags.security, cmd.flags.security_key);
    const rl::RlConfig& cfg = cmd.config;
    const ToolFlags& cli = cmd.flags;
    agent::check_device(cfg.learner_device.empty() ? cfg.device : cfg.learner_device,
                        cfg.learner_device.empty() ? "agent.device" : "learner.device");
    auto env = envs::make_env(cfg.env);
    const auto space = env->action_space();
    const int act_dim = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
    models::set_torch_threads(cfg.torch_threads);
    agent::Algorithm algo = agent::make_algorithm(cfg, env->observation_space().dim(),
                                                  act_dim > 0 ? 0 : space.n, act_dim, agent::Role::LearnerProcess);
    auto* learner = dynamic_cast<agent::AsyncLearner*>(algo.learner.get());
    if (!learner)
      throw ConfigError("distrl-learner learns appo or impala (learner.algo), not " + cfg.algo);
    if (cli.check_only) return 0;

    set_log_tag("learner");
    std::filesystem::create_directories(cfg.out_dir);  // on a host of its own, nothing made it yet
    const std::string path = cfg.out_dir + "/learner.pt";
    std::mutex mu;
    long long updates = 0;
    int finished = -1;  // the first agent whose run is over (under mu)
    if (std::filesystem::exists(path)) {
      const auto numbers = learner->load(path);
      const auto it = numbers.find("updates");
      if (it != numbers.end()) updates = static_cast<long long>(it->second);
      std::printf("learner: resumed from %s at policy version %lld (%lld updates)\n", path.c_str(),
                  static_cast<long long>(learner->version()), updates);
      std::fflush(stdout);
    }
    const auto save = [&] {  // under mu
      learner->save(path, {{"updates", static_cast<double>(updates)}});
      DISTRL_LOG(Info, "learner: saved " << path << " at policy version " << learner->version());
    };
    const auto start = std::chrono::steady_clock::now();
    const long long updates_before = updates;
    transport::RpcOptions ro = rl::rpc_options(cfg, cli.world, rl::kLearnerName);
    transport::RpcAgent rpc(ro, [&](transport::RpcAgent& a) {
      a.register_function(rl::kLearn, [&](rl::LearnRequest req) {
        std::lock_guard<std::mutex> lock(mu);
        if (finished >= 0) {  // another agent's run is over: this one ends too
          rl::LearnReply stop;
          stop.stop = true;
          return stop;
        }
        learner->advance_to(req.version);  // versions this learner lost in a restart are not "from the future"
        const agent::AsyncStats st = learner->update(std::move(req.batch));
        ++updates;
        if (cfg.checkpoint_every > 0 && updates % cfg.checkpoint_every == 0) save();
        if (updates % (10 * cfg.log_interval) == 0) {
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::printf("learner: update %lld  version %lld  lag %.1f/%lld  %.1f ms/update\n", updates,
                      static_cast<long long>(learner->version()), st.lag_mean, st.lag_max,
                      1000.0 * s / static_cast<double>(std::max(1LL, updates - updates_before)));
          std::fflush(stdout);
        }
        return learner->reply(st);
      });
      a.register_function(rl::kFinished, [&](int agent) {
        std::lock_guard<std::mutex> lock(mu);
        if (finished >= 0) return;
        finished = agent;
        if (cfg.agents > 1)
          std::printf("learner: %s's run is over; the other agents are told to stop\n", rl::agent_name(agent).c_str());
      });
      a.register_function(rl::kWeights, [&](int) {
        std::lock_guard<std::mutex> lock(mu);
        return learner->weights();
      });
    });
    std::printf("learner: serving %s for the agent on %s, policy version %lld\n", cfg.algo.c_str(),
                (cfg.learner_device.empty() ? cfg.device : cfg.learner_device).c_str(),
                static_cast<long long>(learner->version()));
    std::fflush(stdout);
    install_stop_handlers();  // SIGINT/SIGTERM: the agents (stopped too) end the run, then this
    // Serves until every agent has finished (roles.agents), in whatever order; one whose
    // connection drops is named at once, and the learner goes on with the others' batches.
    std::set<int> serving;
    for (int k = 0; k < cfg.agents; ++k) {
      rpc.watch(rl::agent_name(k));
      serving.insert(k);
    }
    int lost = 0;
    while (!serving.empty()) {
      for (auto it = serving.begin(); it != serving.end();) {
        const std::string name = rl::agent_name(*it);
        if (rpc.has_shut_down(name)) {
          it = serving.erase(it);
        } else if (rpc.connection_lost(name)) {
          ++lost;
          DISTRL_LOG(Warn, "learner: " << name << " (rank " << *it << ") is gone"
                                       << (lost < cfg.agents ? "; learning goes on with the other agents' batches"
                                                             : ", the last agent"));
          it = serving.erase(it);
        } else {
          ++it;
        }
      }
      if (lost == cfg.agents) {  // every agent is gone: keep what was learned
        std::lock_guard<std::mutex> lock(mu);
        save();
        throw TransportError("every agent is gone (rpc.timeout_s, or their processes died): the learner saved " +
                             path + " and leaves");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      save();
    }
    rpc.shutdown();
    std::printf("learner: %lld updates, policy version %lld; saved %s\n", updates,
                static_cast<long long>(learner->version()), path.c_str());
    return stop_exit_code();
  });
}
