// n copies of one environment stepped in one call over flat, preallocated buffers: row i of
// obs() is env i's observation. Env i is seeded seed + i. A finished env stays finished
// (and is skipped) until reset_all(), or is restarted at once with autoreset. A time limit
// (max_episode_steps > 0) truncates an episode at that many steps, as Gymnasium's TimeLimit
// (the env's own limit still applies).
//
// `gymnasium:ID` envs are stepped by one Python child for all n (envs/detail/gymnasium_child.h):
// a step() is one wake-up of the child, which steps, resets and writes every env's row into a
// shared buffer; the outcome is the same as n GymnasiumEnvs' (seeds, time limits, final
// observations), without n processes and n round trips.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "envs/env.h"

namespace distrl::envs {

namespace detail {
class GymnasiumChild;
}

class VecEnv {
 public:
  VecEnv(const std::string& name, int n, std::uint64_t seed, bool autoreset = false, int max_episode_steps = 0);
  ~VecEnv();
  VecEnv(VecEnv&&) noexcept;
  VecEnv& operator=(VecEnv&&) noexcept;

  int size() const { return static_cast<int>(rewards_.size()); }
  int obs_dim() const { return obs_dim_; }
  const std::string& name() const { return name_; }
  const Space& observation_space() const { return obs_space_; }
  const Space& action_space() const { return act_space_; }

  // After an error from an env (an EnvError from step() or reset_all()), step() refuses until
  // reset_all() succeeds: some envs may have stepped and others not.
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
  // step() of either kind: refused after a failure; a throw leaves failed_ set.
  template <typename Action, typename StepFn>
  void guarded(const Action* actions, StepFn&& step);
  // gymnasium:ID: the child steps every running env; then the same bookkeeping as step_all's.
  template <typename Action>
  void step_child(const Action* actions);
  // After env i's step (done: its episode ended): its flags, its episode's count, and its
  // restart or its end. `restart` writes its next first observation to `row` (native envs).
  template <typename Restart>
  void account(int i, Step s, Restart&& restart);

  std::string name_;
  std::vector<std::unique_ptr<Env>> envs_;           // native envs (empty for gymnasium:ID)
  std::unique_ptr<detail::GymnasiumChild> child_;    // gymnasium:ID (null for native envs)
  std::vector<std::optional<std::uint64_t>> seeds_;  // the child's next resets' seeds
  std::vector<std::uint8_t> commands_, all_;         // the child's commands; n ones
  Space obs_space_, act_space_;
  int obs_dim_ = 0;
  bool autoreset_ = false;
  std::vector<float> obs_, rewards_, final_obs_;
  std::vector<std::uint8_t> terminated_, truncated_, running_;
  int max_episode_steps_ = 0;
  std::vector<int> episode_steps_;
  int num_running_ = 0;
  bool failed_ = false;  // an env threw: reset_all() first
};

}  // namespace distrl::envs
