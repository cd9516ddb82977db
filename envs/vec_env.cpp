#include "envs/vec_env.h"

#include <algorithm>

#include "common/error.h"

namespace distrl::envs {

VecEnv::VecEnv(const std::string& name, int n, std::uint64_t seed, bool autoreset, int max_episode_steps)
    : autoreset_(autoreset), max_episode_steps_(max_episode_steps) {
  if (n < 1) throw EnvError("VecEnv: needs at least one env, got " + std::to_string(n));
  if (max_episode_steps < 0)
    throw EnvError("VecEnv: max_episode_steps must be 0 (none) or positive, got " + std::to_string(max_episode_steps));
  for (int i = 0; i < n; ++i) {
    envs_.push_back(make_env(name));
    envs_.back()->seed(seed + static_cast<std::uint64_t>(i));
  }
  obs_dim_ = envs_[0]->observation_space().dim();
  obs_.assign(static_cast<std::size_t>(n) * obs_dim_, 0.0f);
  final_obs_.assign(obs_.size(), 0.0f);
  rewards_.assign(n, 0.0f);
  terminated_.assign(n, 0);
  truncated_.assign(n, 0);
  running_.assign(n, 0);
  episode_steps_.assign(n, 0);
}

void VecEnv::reset_all() {
  for (int i = 0; i < size(); ++i) {
    envs_[i]->reset(obs_.data() + static_cast<std::size_t>(i) * obs_dim_);
    running_[i] = 1;
    episode_steps_[i] = 0;
    rewards_[i] = 0;
    terminated_[i] = truncated_[i] = 0;
  }
  num_running_ = size();
}

template <typename StepOne>
void VecEnv::step_all(StepOne&& step_one) {
  for (int i = 0; i < size(); ++i) {
    if (!running_[i]) {
      rewards_[i] = 0;
      continue;
    }
    float* row = obs_.data() + static_cast<std::size_t>(i) * obs_dim_;
    Step s = step_one(i, row);
    if (++episode_steps_[i] == max_episode_steps_ && !s.terminated) s.truncated = true;
    rewards_[i] = s.reward;
    terminated_[i] = s.terminated;
    truncated_[i] = s.truncated;
    if (s.done()) {
      episode_steps_[i] = 0;
      if (autoreset_) {
        std::copy(row, row + obs_dim_, final_obs_.begin() + static_cast<std::ptrdiff_t>(i) * obs_dim_);
        envs_[i]->reset(row);
      } else {
        running_[i] = 0;
        --num_running_;
      }
    }
  }
}

void VecEnv::step(const int* actions) {
  step_all([&](int i, float* row) { return envs_[i]->step(actions[i], row); });
}

void VecEnv::step(const float* actions) {
  const int adim = envs_[0]->action_space().dim();
  step_all([&](int i, float* row) { return envs_[i]->step(actions + static_cast<std::size_t>(i) * adim, row); });
}

}  // namespace distrl::envs
