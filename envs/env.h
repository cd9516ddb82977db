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
#include <string>
#include <vector>

namespace distrl::envs {

struct Space {
  enum class Kind { Discrete, Box };
  Kind kind = Kind::Box;
  int n = 0;                          // Discrete: number of actions
  std::vector<float> low, high;       // Box: bounds per dimension
  int dim() const { return kind == Kind::Discrete ? 1 : static_cast<int>(low.size()); }
  std::string describe() const;       // "Discrete(2)", "Box(4)"
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
  virtual Step step(int action, float* obs);
  // Box action spaces: action has action_space().dim() values.
  virtual Step step(const float* action, float* obs);
};

using EnvFactory = std::function<std::unique_ptr<Env>()>;

// Throws EnvError naming the registered environments when name is unknown.
std::unique_ptr<Env> make_env(const std::string& name);
void register_env(const std::string& name, EnvFactory factory);
std::vector<std::string> env_names();

}  // namespace distrl::envs
