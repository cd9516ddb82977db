// LunarLander-v2/-v3 and LunarLanderContinuous-v2/-v3 after Gym's specification (gym/envs/box2d/
// lunar_lander.py), on Box2D 2.4: FPS 50, SCALE 30, a 600x400 viewport, terrain of 11 chunks
// with a flat helipad at H/4 over the middle, main engine 13, side engines 0.6, a random
// initial push of up to 1000 N per axis, two spring-loaded legs, optional wind and turbulence.
//
// Observation (8 floats): x and y relative to the helipad, velocities scaled by (W/2)/FPS and
// (H/2)/FPS, angle, 20 * angular velocity / FPS, left and right leg contact.
// Reward: the change of shaping = -100*|position| - 100*|velocity| - 100*|angle| + 10 per leg
// on the ground, minus 0.3 per frame of main engine and 0.03 per frame of side engine;
// -100 and the end when the body touches the ground or |x| >= 1; +100 and the end when the
// lander comes to rest (Box2D puts it to sleep); truncated at 1000 steps; solved at 200.
//
// As Gymnasium 1.4's LunarLander-v3 steps (a fresh world at every reset, the wind's phase drawn
// anew per episode), under v2's names and observation bounds (x, y ±1.5, velocities ±5, angle
// ±π) or v3's (±2.5, ±10, ±2π): LunarLander-v2 and -v3, LunarLanderContinuous-v2 and -v3 differ in
// those bounds alone. Differences from Gymnasium:
// - Box2D 2.4.1 (Debian) instead of pybox2d's 2.3: the same model, but 2.4 solves a revolute
//   joint's limit and motor apart rather than as one block, so one step from equal states
//   agrees to solver tolerance, not bit for bit (tests/unit/envs/lunar_lander_test.cpp states
//   the bounds it checks against Gymnasium itself).
// - Random numbers come from envs/random.h, so a seed gives another terrain than numpy's does;
//   replay_draws() feeds Gymnasium's own draws instead (terrain, push, wind, dispersion).
// - A terminal step at the time limit is `terminated` only (Gymnasium's TimeLimit sets both).
// Gymnasium, too, creates its exhaust particles only when it renders: they never touch the lander.
// Nearly all of a step is Box2D's: 180 velocity iterations over the two leg joints
// (docs/benchmarks.md, "Environments"). Not thread-safe: one env, one thread.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "envs/body_state.h"
#include "envs/env.h"

namespace distrl::envs {

namespace detail {
class Draws;
}

struct LunarLanderOptions {
  bool continuous = false;
  int version = 2;         // 2 or 3: the name's version and its observation bounds (the steps are v3's either way)
  double gravity = -10.0;  // (-12, 0)
  bool enable_wind = false;
  double wind_power = 15.0;       // [0, 20]
  double turbulence_power = 1.5;  // [0, 2]
};

class LunarLander final : public Env {
 public:
  // Gymnasium's constants; like its Python, the env computes in double and rounds into Box2D.
  static constexpr double kFps = 50;
  static constexpr double kScale = 30;
  static constexpr double kViewportW = 600, kViewportH = 400;
  static constexpr double kW = kViewportW / kScale, kH = kViewportH / kScale;  // world units
  static constexpr double kMainEnginePower = 13;
  static constexpr double kSideEnginePower = 0.6;
  static constexpr double kInitialRandom = 1000;
  static constexpr double kLegAway = 20, kLegDown = 18, kLegW = 2, kLegH = 8, kLegSpringTorque = 40;
  static constexpr double kSideEngineHeight = 14, kSideEngineAway = 12;
  static constexpr int kChunks = 11;
  static constexpr int kMaxSteps = 1000;

  explicit LunarLander(LunarLanderOptions options = {});
  ~LunarLander() override;

  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return kMaxSteps; }
  float reward_threshold() const override { return 200.0f; }
  void seed(std::uint64_t seed) override;
  using Env::reset;
  void reset(float* obs) override;
  using Env::step;
  Step step(int action, float* obs) override;           // LunarLander-v2: 0 noop, 1 left, 2 main, 3 right
  Step step(const float* action, float* obs) override;  // continuous: [main, lateral] in [-1, 1]

  // What a picture needs, in world units (x right, y up): the terrain polyline, the helipad,
  // and the outlines of the lander and its legs.
  struct Scene {
    std::vector<std::array<float, 2>> terrain;
    float helipad_x1 = 0, helipad_x2 = 0, helipad_y = 0;
    std::vector<std::array<float, 2>> lander;
    std::array<std::vector<std::array<float, 2>>, 2> legs;
    std::array<bool, 2> leg_contact{};
    float main_power = 0, side_power = 0;  // of the last step
    int side_direction = 0;                // -1 left engine fired, +1 right
  };
  Scene scene() const;
  bool awake() const;  // false once the lander rests

  // Tests: the next reset and the steps of its episode take their random numbers from `draws`
  // instead of the generator, in the order Gymnasium's np_random gives them: 12 terrain
  // heights, the push's x and y, with wind its two phases, then two dispersions per step (the
  // reset's own first step included). A draw that does not fit its call (out of range, not
  // an integer, none left) is an EnvError; the reset after that episode uses the generator.
  void replay_draws(std::vector<double> draws);

  using BodyState = envs::BodyState;
  // The lander, then its left and right leg (Gymnasium's order); zeros before the first reset.
  std::array<BodyState, 3> bodies() const;
  double prev_shaping() const;  // the last step's shaping; 0 before the first reset

 private:
  struct World;
  void build_world();  // terrain, lander, legs, joints: into w_
  Step advance(double main_power, double side_power, int side_direction, float* obs);

  LunarLanderOptions opt_;
  std::string name_;
  std::unique_ptr<detail::Draws> draws_;  // the generator, or Gymnasium's replayed draws
  std::unique_ptr<World> w_;
  int steps_ = 0;
  bool done_ = true;
};

// Gym's scripted lander (demo_heuristic_lander): points the lander at the pad and hovers down.
// Scores about 200+ on most seeds; tests and benchmarks use it as a known-good policy.
int lunar_lander_heuristic(const float* obs);
std::array<float, 2> lunar_lander_heuristic_continuous(const float* obs);

}  // namespace distrl::envs
