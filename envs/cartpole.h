// CartPole-v1 with Gym's exact dynamics (gym/envs/classic_control/cartpole.py, Euler
// integrator) and its TimeLimit of 500 steps folded in. Internal state is double; the
// observation [x, x_dot, theta, theta_dot] is float32.
#pragma once

#include <array>

#include "envs/env.h"
#include "envs/random.h"

namespace distrl::envs {

class CartPole final : public Env {
 public:
  static constexpr double kGravity = 9.8;
  static constexpr double kMassCart = 1.0;
  static constexpr double kMassPole = 0.1;
  static constexpr double kTotalMass = kMassCart + kMassPole;
  static constexpr double kLength = 0.5;  // half the pole's length
  static constexpr double kPoleMassLength = kMassPole * kLength;
  static constexpr double kForceMag = 10.0;
  static constexpr double kTau = 0.02;  // seconds between state updates
  static constexpr double kThetaThreshold = 12 * 2 * 3.14159265358979323846 / 360;
  static constexpr double kXThreshold = 2.4;
  static constexpr int kMaxSteps = 500;

  CartPole();
  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return kMaxSteps; }
  float reward_threshold() const override { return 475.0f; }
  void seed(std::uint64_t seed) override { rng_.seed(seed); }
  using Env::reset;
  void reset(float* obs) override;
  using Env::step;
  Step step(int action, float* obs) override;

  // The full-precision state, for tests: x, x_dot, theta, theta_dot.
  const std::array<double, 4>& state() const { return s_; }
  void set_state(const std::array<double, 4>& s) { s_ = s; }

 private:
  void observe(float* obs) const;

  Rng rng_;
  std::array<double, 4> s_{};
  int steps_ = 0;
  bool done_ = true;
};

}  // namespace distrl::envs
