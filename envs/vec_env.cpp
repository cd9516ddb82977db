#include "envs/vec_env.h"

#include <algorithm>

#include "common/error.h"
#include "envs/detail/gymnasium_child.h"

namespace distrl::envs {

VecEnv::VecEnv(const std::string& name, int n, std::uint64_t seed, bool autoreset, int max_episode_steps)
    : name_(name), autoreset_(autoreset), max_episode_steps_(max_episode_steps) {
  if (n < 1) throw EnvError("VecEnv: needs at least one env, got " + std::to_string(n));
  if (max_episode_steps < 0)
    throw EnvError("VecEnv: max_episode_steps must be 0 (none) or positive, got " + std::to_string(max_episode_steps));
  if (const auto id = gymnasium_id(name)) {
    child_ = std::make_unique<detail::GymnasiumChild>(*id, n, /*step_timeout_s=*/60, /*make_timeout_s=*/120);
    for (int i = 0; i < n; ++i) seeds_.emplace_back(seed + static_cast<std::uint64_t>(i));
    commands_.assign(n, detail::GymnasiumChild::kSkip);
    all_.assign(n, 1);
    obs_space_ = child_->observation_space();
    act_space_ = child_->action_space();
  } else {
    for (int i = 0; i < n; ++i) {
      envs_.push_back(make_env(name));
      envs_.back()->seed(seed + static_cast<std::uint64_t>(i));
    }
    obs_space_ = envs_[0]->observation_space();
    act_space_ = envs_[0]->action_space();
  }
  obs_dim_ = obs_space_.dim();
  obs_.assign(static_cast<std::size_t>(n) * obs_dim_, 0.0f);
  final_obs_.assign(obs_.size(), 0.0f);
  rewards_.assign(n, 0.0f);
  terminated_.assign(n, 0);
  truncated_.assign(n, 0);
  running_.assign(n, 0);
  episode_steps_.assign(n, 0);
}

VecEnv::~VecEnv() = default;
VecEnv::VecEnv(VecEnv&&) noexcept = default;
VecEnv& VecEnv::operator=(VecEnv&&) noexcept = default;

void VecEnv::reset_all() {
  failed_ = true;  // until every env has restarted
  if (child_) {
    child_->reset(all_.data(), seeds_.data(), obs_.data());
    for (auto& s : seeds_) s.reset();  // used: later resets go on from Gymnasium's generator
  }
  for (int i = 0; i < size(); ++i) {
    if (!child_) envs_[i]->reset(obs_.data() + static_cast<std::size_t>(i) * obs_dim_);
    running_[i] = 1;
    episode_steps_[i] = 0;
    rewards_[i] = 0;
    terminated_[i] = truncated_[i] = 0;
  }
  num_running_ = size();
  failed_ = false;
}

template <typename Restart>
void VecEnv::account(int i, Step s, Restart&& restart) {
  if (++episode_steps_[i] == max_episode_steps_ && !s.terminated) s.truncated = true;
  rewards_[i] = s.reward;
  terminated_[i] = s.terminated;
  truncated_[i] = s.truncated;
  if (!s.done()) return;
  episode_steps_[i] = 0;
  if (autoreset_) {
    restart();
  } else {
    running_[i] = 0;
    --num_running_;
  }
}

template <typename StepOne>
void VecEnv::step_all(StepOne&& step_one) {
  for (int i = 0; i < size(); ++i) {
    if (!running_[i]) {
      rewards_[i] = 0;
      continue;
    }
    float* row = obs_.data() + static_cast<std::size_t>(i) * obs_dim_;
    account(i, step_one(i, row), [&] {
      std::copy(row, row + obs_dim_, final_obs_.begin() + static_cast<std::ptrdiff_t>(i) * obs_dim_);
      envs_[i]->reset(row);
    });
  }
}

template <typename Action>
void VecEnv::step_child(const Action* actions) {
  using Child = detail::GymnasiumChild;
  // The child restarts what account() will restart: an ended episode (autoreset), and one the
  // time limit ends with this step whatever Gymnasium says.
  for (int i = 0; i < size(); ++i)
    commands_[i] = !running_[i]                                  ? Child::kSkip
                   : !autoreset_                                 ? Child::kStep
                   : episode_steps_[i] + 1 == max_episode_steps_ ? Child::kStepThenReset
                                                                 : Child::kStepThenResetIfDone;
  child_->step(commands_.data(), actions,
               {obs_.data(), final_obs_.data(), rewards_.data(), terminated_.data(), truncated_.data()});
  for (int i = 0; i < size(); ++i) {
    if (!running_[i]) {
      rewards_[i] = 0;
      continue;
    }
    Step s;
    s.reward = rewards_[i];
    s.terminated = terminated_[i] != 0;
    s.truncated = truncated_[i] != 0 && !s.terminated;  // terminated wins, as in the native envs
    account(i, s, [] {});                               // the child has restarted it, its last observation in final_obs
  }
}

template <typename Action, typename StepFn>
void VecEnv::guarded(const Action* actions, StepFn&& step) {
  if (failed_) throw EnvError(name_ + ": an env failed in an earlier step; call reset_all()");
  failed_ = true;  // until the step is through
  if (child_) step_child(actions);
  else step();
  failed_ = false;
}

void VecEnv::step(const int* actions) {
  guarded(actions, [&] { step_all([&](int i, float* row) { return envs_[i]->step(actions[i], row); }); });
}

void VecEnv::step(const float* actions) {
  const auto adim = static_cast<std::size_t>(act_space_.dim());
  guarded(actions, [&] { step_all([&](int i, float* row) { return envs_[i]->step(actions + i * adim, row); }); });
}

}  // namespace distrl::envs
