// LunarLander-v2 and LunarLanderContinuous-v2 after Gym's specification (gym/envs/box2d/
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
// Differences from Gym: Box2D 2.4 instead of pybox2d's 2.3 (same model, not bit-identical
// trajectories), and the exhaust particles — decoration that never touches the lander — are
// not simulated. The world is rebuilt at every reset, so a seed replays exactly.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "envs/env.h"
#include "envs/random.h"

namespace distrl::envs {

struct LunarLanderOptions {
  bool continuous = false;
  float gravity = -10.0f;  // (-12, 0)
  bool enable_wind = false;
  float wind_power = 15.0f;       // [0, 20]
  float turbulence_power = 1.5f;  // [0, 2]
};

class LunarLander final : public Env {
 public:
  static constexpr float kFps = 50;
  static constexpr float kScale = 30;
  static constexpr float kViewportW = 600, kViewportH = 400;
  static constexpr float kW = kViewportW / kScale, kH = kViewportH / kScale;  // world units
  static constexpr float kMainEnginePower = 13;
  static constexpr float kSideEnginePower = 0.6f;
  static constexpr float kInitialRandom = 1000;
  static constexpr float kLegAway = 20, kLegDown = 18, kLegW = 2, kLegH = 8, kLegSpringTorque = 40;
  static constexpr float kSideEngineHeight = 14, kSideEngineAway = 12;
  static constexpr int kChunks = 11;
  static constexpr int kMaxSteps = 1000;

  explicit LunarLander(LunarLanderOptions options = {});
  ~LunarLander() override;

  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return kMaxSteps; }
  float reward_threshold() const override { return 200.0f; }
  void seed(std::uint64_t seed) override { rng_.seed(seed); }
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

 private:
  struct World;
  Step advance(float main_power, float side_power, int side_direction, float* obs);

  LunarLanderOptions opt_;
  std::string name_;
  Rng rng_;
  std::unique_ptr<World> w_;
  int steps_ = 0;
  bool done_ = true;
};

// Gym's scripted lander (demo_heuristic_lander): points the lander at the pad and hovers down.
// Scores about 200+ on most seeds; tests and benchmarks use it as a known-good policy.
int lunar_lander_heuristic(const float* obs);
std::array<float, 2> lunar_lander_heuristic_continuous(const float* obs);

}  // namespace distrl::envs
