// n copies of one environment stepped in one call over flat, preallocated buffers: row i of
// obs() is env i's observation. Env i is seeded seed + i. A finished env stays finished
// (and is skipped) until reset_all(), or is restarted at once with autoreset. A time limit
// (max_episode_steps > 0) truncates an episode at that many steps, as Gymnasium's TimeLimit
// (the env's own limit still applies).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.h"

namespace distrl::envs {

class VecEnv {
 public:
  VecEnv(const std::string& name, int n, std::uint64_t seed, bool autoreset = false, int max_episode_steps = 0);

  int size() const { return static_cast<int>(envs_.size()); }
  int obs_dim() const { return obs_dim_; }
  const Env& env(int i) const { return *envs_.at(i); }

  void reset_all();
  // actions[i] is env i's action (discrete); entries of finished envs are ignored.
  void step(const int* actions);
  // actions holds size() x action_dim values (continuous).
  void step(const float* actions);

  const float* obs() const { return obs_.data(); }
  const float* obs(int i) const { return obs_.data() + static_cast<std::size_t>(i) * obs_dim_; }
  // The last step's outcome per env (reward 0 for envs that did not step).
  const std::vector<float>& rewards() const { return rewards_; }
  const std::vector<std::uint8_t>& terminated() const { return terminated_; }
  const std::vector<std::uint8_t>& truncated() const { return truncated_; }
  bool running(int i) const { return running_[i] != 0; }
  // With autoreset: env i's last observation of the episode that ended in the last step (its
  // row in obs() already holds the next episode's first one).
  const float* final_obs(int i) const { return final_obs_.data() + static_cast<std::size_t>(i) * obs_dim_; }
  int num_running() const { return num_running_; }

 private:
  template <typename StepOne>
  void step_all(StepOne&& step_one);

  std::vector<std::unique_ptr<Env>> envs_;
  int obs_dim_ = 0;
  bool autoreset_ = false;
  std::vector<float> obs_, rewards_, final_obs_;
  std::vector<std::uint8_t> terminated_, truncated_, running_;
  int max_episode_steps_ = 0;
  std::vector<int> episode_steps_;
  int num_running_ = 0;
};

}  // namespace distrl::envs
