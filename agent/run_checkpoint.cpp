#include "agent/run_checkpoint.h"

#include "common/error.h"
#include "models/checkpoint.h"

namespace distrl::agent {

void save_run(Learner& learner, const Progress& p, const std::string& path) {
  // Counts are exact in a double up to 2^53.
  learner.save(path, {{"running_reward", p.running_reward},
                      {"rounds", static_cast<double>(p.rounds)},
                      {"episodes", static_cast<double>(p.episodes)},
                      {"env_steps", static_cast<double>(p.env_steps)},
                      {"seconds", p.seconds},
                      {"ppo", learner.actor_critic() ? 1.0 : 0.0}});  // whose checkpoint: a refusal names it
}

Progress load_run(Learner& learner, const std::string& path, const rl::RlConfig& cfg) {
  std::map<std::string, double> n;
  try {
    n = learner.load(path);
  } catch (const ConfigError& e) {
    const auto saved = models::checkpoint_numbers(path);
    if (const auto ppo = saved.find("ppo"); ppo != saved.end() && (ppo->second != 0) != learner.actor_critic()) {
      const std::string was = ppo->second != 0 ? "ppo" : "reinforce";
      throw ConfigError("checkpoint '" + path + "' was saved by a learner.algo " + was + " run, and this run is " +
                        cfg.algo + ": load it with learner.algo " + was +
                        " (and that run's model keys), or start "
                        "without it");
    }
    throw ConfigError(std::string(e.what()) + " (this run: learner.algo " + cfg.algo + ", env " + cfg.env +
                      ", model.hidden as configured; a checkpoint of another algorithm, env or model does not fit)");
  }
  const auto get = [&](const char* key) { return n.count(key) ? n[key] : 0.0; };
  Progress p;
  p.running_reward = get("running_reward");
  p.rounds = static_cast<int>(get("rounds"));
  p.episodes = static_cast<long long>(get("episodes"));
  p.env_steps = static_cast<long long>(get("env_steps"));
  p.seconds = get("seconds");
  return p;
}

}  // namespace distrl::agent
