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
#include "transport/bootstrap/security.h"

namespace {

using namespace distrl;

// The learner's state behind the RPC handlers: one update at a time under mu.
class LearnerService {
 public:
  LearnerService(const rl::RlConfig& cfg, agent::AsyncLearner& learner)
      : cfg_(cfg), learner_(learner), path_(cfg.out_dir + "/learner.pt") {}

  const std::string& path() const { return path_; }
  long long updates() const { return updates_; }

  // Goes on from OUT_DIR/learner.pt when it is there.
  void resume() {
    if (!std::filesystem::exists(path_)) return;
    const auto numbers = learner_.load(path_);
    const auto it = numbers.find("updates");
    if (it != numbers.end()) updates_ = static_cast<long long>(it->second);
    std::printf("learner: resumed from %s at policy version %lld (%lld updates)\n", path_.c_str(),
                static_cast<long long>(learner_.version()), updates_);
    std::fflush(stdout);
    updates_before_ = updates_;
  }

  void save() {
    std::lock_guard<std::mutex> lock(mu_);
    save_locked();
  }

  void register_on(transport::RpcAgent& a) {
    a.register_function(rl::kLearn, [this](rl::LearnRequest req) { return learn(std::move(req)); });
    a.register_function(rl::kFinished, [this](int agent) {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ >= 0) return;
      finished_ = agent;
      if (cfg_.agents > 1)
        std::printf("learner: %s's run is over; the other agents are told to stop\n", rl::agent_name(agent).c_str());
    });
    a.register_function(rl::kWeights, [this](int) {
      std::lock_guard<std::mutex> lock(mu_);
      return learner_.weights();
    });
  }

 private:
  rl::LearnReply learn(rl::LearnRequest req) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ >= 0) {  // another agent's run is over: this one ends too
      rl::LearnReply stop;
      stop.stop = true;
      return stop;
    }
    learner_.advance_to(req.version);  // versions this learner lost in a restart are not "from the future"
    const agent::AsyncStats st = learner_.update(std::move(req.batch));
    ++updates_;
    if (cfg_.checkpoint_every > 0 && updates_ % cfg_.checkpoint_every == 0) save_locked();
    if (updates_ % (10 * cfg_.log_interval) == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      std::printf("learner: update %lld  version %lld  lag %.1f/%lld  %.1f ms/update\n", updates_,
                  static_cast<long long>(learner_.version()), st.lag_mean, st.lag_max,
                  1000.0 * s / static_cast<double>(std::max(1LL, updates_ - updates_before_)));
      std::fflush(stdout);
    }
    return learner_.reply(st);
  }

  void save_locked() {
    learner_.save(path_, {{"updates", static_cast<double>(updates_)}});
    DISTRL_LOG(Info, "learner: saved " << path_ << " at policy version " << learner_.version());
  }

  const rl::RlConfig& cfg_;
  agent::AsyncLearner& learner_;
  const std::string path_;
  std::mutex mu_;
  long long updates_ = 0, updates_before_ = 0;
  int finished_ = -1;  // the first agent whose run is over
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Serves until every agent has finished (roles.agents), in whatever order; one whose connection
// drops is named at once, and the learner goes on with the others' batches. TransportError
// (after a save) when every agent is gone.
void serve_until_the_agents_finish(transport::RpcAgent& rpc, const rl::RlConfig& cfg, LearnerService& service) {
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
      service.save();
      throw TransportError("every agent is gone (rpc.timeout_s, or their processes died): the learner saved " +
                           service.path() + " and leaves");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-learner", [&] {
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
    agent::Algorithm algo = agent::make_algorithm(cfg, env->observation_space().dim(), act_dim > 0 ? 0 : space.n,
                                                  act_dim, agent::Role::LearnerProcess);
    auto* learner = dynamic_cast<agent::AsyncLearner*>(algo.learner.get());
    if (!learner) throw ConfigError("distrl-learner learns appo or impala (learner.algo), not " + cfg.algo);
    if (cli.check_only) return 0;

    set_log_tag("learner");
    std::filesystem::create_directories(cfg.out_dir);  // on a host of its own, nothing made it yet
    LearnerService service(cfg, *learner);
    service.resume();
    transport::RpcAgent rpc(rl::rpc_options(cfg, cli.world, rl::kLearnerName),
                            [&](transport::RpcAgent& a) { service.register_on(a); });
    std::printf("learner: serving %s for the agent on %s, policy version %lld\n", cfg.algo.c_str(),
                (cfg.learner_device.empty() ? cfg.device : cfg.learner_device).c_str(),
                static_cast<long long>(learner->version()));
    std::fflush(stdout);
    install_stop_handlers();  // SIGINT/SIGTERM: the agents (stopped too) end the run, then this
    serve_until_the_agents_finish(rpc, cfg, service);
    service.save();
    rpc.shutdown();
    std::printf("learner: %lld updates, policy version %lld; saved %s\n", service.updates(),
                static_cast<long long>(learner->version()), service.path().c_str());
    return stop_exit_code();
  });
}
