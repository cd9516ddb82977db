// Native C++ environments behind one small interface, made by name:
//
//   auto env = distrl::envs::make_env("CartPole-v1");
//   std::vector<float> obs(env->observation_space().dim());
//   env->reset(/*seed=*/1, obs.data());
//   distrl::envs::Step s = env->step(/*action=*/1, obs.data());   // s.reward, s.terminated, s.truncated
//
// Observations are float32 written into a caller-owned buffer (no allocation per step), so a
// vectorized env can lay many envs' rows side by side. Not thread-safe: one env, one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace distrl::envs {

// The layout of Space, Step and Env's virtual functions, as an environment plugin
// (envs/plugin.h) compiled against these headers sees them: bumped with every change to them,
// so that a plugin built against other headers is refused rather than called wrongly. Env's
// defaults are inline, so a plugin needs these headers and no distrl library.
inline constexpr int kEnvAbi = 1;

struct Space {
  enum class Kind { Discrete, Box };
  Kind kind = Kind::Box;
  int n = 0;                     // Discrete: number of actions
  std::vector<float> low, high;  // Box: bounds per dimension
  int dim() const { return kind == Kind::Discrete ? 1 : static_cast<int>(low.size()); }
  std::string describe() const {  // "Discrete(2)", "Box(4)"
    return kind == Kind::Discrete ? "Discrete(" + std::to_string(n) + ")" : "Box(" + std::to_string(low.size()) + ")";
  }
};

struct Step {
  float reward = 0;
  bool terminated = false;  // the MDP ended (pole fell, lander crashed)
  bool truncated = false;   // the time limit cut the episode
  bool done() const { return terminated || truncated; }
};

class Env {
 public:
  virtual ~Env() = default;
  virtual const std::string& name() const = 0;
  virtual Space observation_space() const = 0;
  virtual Space action_space() const = 0;
  virtual int max_episode_steps() const = 0;
  virtual float reward_threshold() const = 0;  // "solved" level of the average return

  // Reseeds the env's generator; the next reset() starts from it. Same seed, same actions ->
  // same trajectory.
  virtual void seed(std::uint64_t seed) = 0;
  // Starts an episode and writes the first observation.
  virtual void reset(float* obs) = 0;
  void reset(std::uint64_t seed_value, float* obs) {
    seed(seed_value);
    reset(obs);
  }
  // Discrete action spaces; throws EnvError for an action out of range, for a continuous env,
  // or after the episode ended (call reset()).
  virtual Step step(int /*action*/, float* /*obs*/) {
    throw EnvError(name() + ": takes continuous actions (" + action_space().describe() + "), not a discrete one");
  }
  // Box action spaces: action has action_space().dim() values.
  virtual Step step(const float* /*action*/, float* /*obs*/) {
    throw EnvError(name() + ": takes a discrete action (" + action_space().describe() + "), not a vector");
  }
};

using EnvFactory = std::function<std::unique_ptr<Env>()>;

// env.name's prefix for Gymnasium's own environments, stepped by Python (envs/gymnasium_env.h).
inline constexpr const char* kGymnasiumPrefix = "gymnasium:";
// The ID after the prefix ("" when it is empty), or nullopt for any other name.
inline std::optional<std::string> gymnasium_id(const std::string& name) {
  const std::string prefix = kGymnasiumPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  return name.substr(prefix.size());
}

// A registered environment, or "gymnasium:ID". Throws EnvError naming the registered
// environments when name is unknown.
std::unique_ptr<Env> make_env(const std::string& name);
// Registers the environments of a plugin (envs/plugin.h): a shared library built against the
// installed headers, named by a config's env.plugin. Loaded once per path (again: nothing
// happens) and never unloaded. ConfigError naming the file and the fix when it cannot be
// loaded, is not a plugin, or was built against other headers or another C++ ABI.
// Returns the names it added.
std::vector<std::string> load_env_plugin(const std::string& path);
void register_env(const std::string& name, EnvFactory factory);
std::vector<std::string> env_names();

}  // namespace distrl::envs
