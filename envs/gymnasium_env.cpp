#include "envs/gymnasium_env.h"

#include <cstdint>

#include "common/error.h"
#include "envs/detail/gymnasium_child.h"

namespace distrl::envs {

GymnasiumEnv::GymnasiumEnv(const std::string& id, double step_timeout_s, double make_timeout_s)
    : child_(std::make_unique<detail::GymnasiumChild>(id, 1, step_timeout_s, make_timeout_s)) {}

GymnasiumEnv::~GymnasiumEnv() = default;

const std::string& GymnasiumEnv::name() const { return child_->name(); }
Space GymnasiumEnv::observation_space() const { return child_->observation_space(); }
Space GymnasiumEnv::action_space() const { return child_->action_space(); }
int GymnasiumEnv::max_episode_steps() const { return child_->max_episode_steps(); }
float GymnasiumEnv::reward_threshold() const { return child_->reward_threshold(); }

void GymnasiumEnv::reset(float* obs) {
  const std::uint8_t one = 1;
  done_ = true;  // until the reset is through: after an error, the episode's state is Gymnasium's
  child_->reset(&one, &pending_seed_, obs);
  pending_seed_.reset();  // used: later resets go on from Gymnasium's generator
  done_ = false;
}

template <typename Action>
Step GymnasiumEnv::step_one(const Action* action, float* obs) {
  if (done_) throw EnvError(name() + ": step() after the episode ended; call reset()");
  const std::uint8_t command = detail::GymnasiumChild::kStep;
  std::uint8_t terminated = 0, truncated = 0;
  child_->check(&command, action);  // a refused action changes nothing
  Step s;
  done_ = true;  // an error leaves the episode's state to Gymnasium: start again with reset()
  child_->step(&command, action, {obs, nullptr, &s.reward, &terminated, &truncated});
  s.terminated = terminated != 0;
  s.truncated = truncated != 0 && !s.terminated;  // terminated wins, as in the native envs
  done_ = s.done();
  return s;
}

Step GymnasiumEnv::step(int action, float* obs) {
  if (child_->action_space().kind != Space::Kind::Discrete) return Env::step(action, obs);
  return step_one(&action, obs);
}

Step GymnasiumEnv::step(const float* action, float* obs) {
  if (child_->action_space().kind != Space::Kind::Box) return Env::step(action, obs);
  return step_one(action, obs);
}

}  // namespace distrl::envs
