// Gymnasium's other classic-control environments, with its exact dynamics, spaces, rewards,
// terminations and time limits (gymnasium 1.x, envs/classic_control/*.py; checked against it
// step by step by tests/unit/envs/gymnasium_test.cpp):
//   Acrobot-v1               Discrete(3) torques -1/0/+1; Box(6) [cos t1, sin t1, cos t2, sin t2, dt1, dt2];
//                            -1 per step until the tip is a link above the pivot; RK4 over 0.2 s; 500 steps.
//   MountainCar-v0           Discrete(3) push left/none/right; Box(2) [position, velocity]; -1 per step
//                            until position >= 0.5; 200 steps.
//   MountainCarContinuous-v0 Box(1) force in [-1, 1]; 100 at the goal (position >= 0.45) minus
//                            0.1 force^2 per step; 999 steps.
//   Pendulum-v1              Box(1) torque in [-2, 2]; Box(3) [cos t, sin t, dt]; reward
//                            -(angle^2 + 0.1 dt^2 + 0.001 u^2); never terminates; 200 steps.
// Internal state is double, as in Gymnasium (MountainCarContinuous keeps float32 after a step, as
// it does); observations are float32. Initial states come from envs/random.h's generator, so a
// seed gives the same episode here on every machine, not Gymnasium's (numpy's PCG64) episode.
// Not thread-safe: one env, one thread.
#pragma once

#include <array>
#include <string>

#include "envs/env.h"
#include "envs/random.h"

namespace distrl::envs {

// What the four share: the time limit, the end-of-episode guard, the seed.
class ClassicControl : public Env {
 public:
  void seed(std::uint64_t seed) override { rng_.seed(seed); }
  using Env::reset;
  void reset(float* obs) final;
  using Env::step;

 protected:
  // The episode's first state (from rng_), then the observation of the current state.
  virtual void start() = 0;
  virtual void observe(float* obs) const = 0;
  // Checks done_, counts the step and sets truncated at the time limit; `terminated` from the
  // env's own step.
  Step finish(float reward, bool terminated, float* obs);
  void check_running() const;

  Rng rng_;
  int steps_ = 0;
  bool done_ = true;
};

class Acrobot final : public ClassicControl {
 public:
  static constexpr double kDt = 0.2;
  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return 500; }
  float reward_threshold() const override { return -100.0f; }
  using ClassicControl::step;
  Step step(int action, float* obs) override;

  // theta1, theta2, dtheta1, dtheta2 (for tests).
  const std::array<double, 4>& state() const { return s_; }
  void set_state(const std::array<double, 4>& s) { s_ = s; }

 private:
  void start() override;
  void observe(float* obs) const override;
  std::array<double, 4> s_{};
};

class MountainCar final : public ClassicControl {
 public:
  explicit MountainCar(bool continuous) : continuous_(continuous) {}
  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return continuous_ ? 999 : 200; }
  float reward_threshold() const override { return continuous_ ? 90.0f : -110.0f; }
  using ClassicControl::step;
  Step step(int action, float* obs) override;           // MountainCar-v0
  Step step(const float* action, float* obs) override;  // MountainCarContinuous-v0

  // position, velocity (for tests).
  const std::array<double, 2>& state() const { return s_; }
  void set_state(const std::array<double, 2>& s) { s_ = s; }

 private:
  void start() override;
  void observe(float* obs) const override;
  bool move(double force_term);  // the car's step; true at the flag
  bool continuous_;
  std::array<double, 2> s_{};
};

class Pendulum final : public ClassicControl {
 public:
  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return 200; }
  // Gymnasium registers none; -200 (mean return of the last 100 episodes) is the level usually
  // called solved, and what configs/pendulum_ppo.yaml stops at.
  float reward_threshold() const override { return -200.0f; }
  using ClassicControl::step;
  Step step(const float* action, float* obs) override;

  // theta, dtheta (for tests).
  const std::array<double, 2>& state() const { return s_; }
  void set_state(const std::array<double, 2>& s) { s_ = s; }

 private:
  void start() override;
  void observe(float* obs) const override;
  std::array<double, 2> s_{};
};

}  // namespace distrl::envs
