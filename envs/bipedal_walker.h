// BipedalWalker-v3 and BipedalWalkerHardcore-v3 as Gymnasium 1.4 defines them
// (gymnasium/envs/box2d/bipedal_walker.py), on Box2D 2.4: a hull on two legs of two segments,
// four motors (hips and knees) driven at +-4 / +-6 rad/s with up to 80 N·m each, FPS 50,
// SCALE 30, 6·30 / 2·30 solver iterations; 200 terrain steps of 14/30 world units, grass with
// a random slope after a flat start pad, and in the hardcore variant stumps, stairs and pits.
//
// Action Box(4) in [-1, 1]: hip 1, knee 1, hip 2, knee 2; the sign picks the motor's direction
// and the magnitude its torque. Observation Box(24): hull angle, angular velocity, x and y
// velocity (scaled), per leg hip angle and speed, knee angle + 1 and speed, lower-leg ground
// contact; then 10 lidar fractions (the closest terrain along rays fanning 0..1.35 rad ahead
// of straight down, 160/30 units long). Reward: the change of 130·x/30 − 5·|hull angle| minus
// 0.028·|a| per motor; −100 and the end when the hull touches the ground or x < 0; the end
// (no penalty) past the last 10 terrain steps; truncated at 1600 steps (hardcore 2000);
// solved at 300.
//
// Differences from Gymnasium:
// - Box2D 2.4.1 (Debian) instead of pybox2d's 2.3: the same model, but 2.4 solves a revolute
//   joint's limit and motor apart rather than as one block, so one step from equal states
//   agrees to about 1e-3, not bit for bit, and whole trajectories drift apart
//   (tests/unit/envs/bipedal_walker_test.cpp states the bounds it checks).
// - Random numbers come from envs/random.h, so a seed gives another terrain than numpy's does.
//   replay_draws() feeds Gymnasium's own draws instead, and the terrain is then Gymnasium's
//   exactly (the test checks it).
// - Clouds (decoration) are not generated; the world is rebuilt at every reset (Gymnasium keeps
//   one b2World, so from its second episode on its contacts may come in another order).
// - A terminal step at the time limit is `terminated` only (Gymnasium's TimeLimit sets both).
// Not thread-safe: one env, one thread.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "envs/body_state.h"
#include "envs/env.h"

namespace distrl::envs {

namespace detail {
class Draws;
}

class BipedalWalker final : public Env {
 public:
  static constexpr double kFps = 50, kScale = 30;
  static constexpr double kMotorsTorque = 80, kSpeedHip = 4, kSpeedKnee = 6;
  static constexpr double kTerrainStep = 14 / kScale;
  static constexpr int kTerrainLength = 200, kTerrainGrass = 10, kTerrainStartpad = 20;
  static constexpr int kLidarRays = 10;

  explicit BipedalWalker(bool hardcore = false);
  ~BipedalWalker() override;

  const std::string& name() const override { return name_; }
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override { return hardcore_ ? 2000 : 1600; }
  float reward_threshold() const override { return 300.0f; }
  void seed(std::uint64_t seed) override;
  using Env::reset;
  void reset(float* obs) override;
  using Env::step;
  Step step(const float* action, float* obs) override;

  // Tests: the next reset takes its random numbers from `draws` instead of the generator (the
  // reset after it the generator's again), in
  // the order Gymnasium's np_random gives them (the terrain's, then the initial push; clouds
  // excluded), so that a Gymnasium episode is rebuilt here. A draw that does not fit the
  // call (out of range, not an integer, too few, some left unused) is an EnvError naming it.
  void replay_draws(std::vector<double> draws);

  using BodyState = envs::BodyState;
  // Hull, then hip-1 leg, knee-1 leg, hip-2 leg, knee-2 leg (Gymnasium's order).
  std::array<BodyState, 5> bodies() const;
  double prev_shaping() const;

  // What a picture (or a test) needs, in world units: the ground polyline, the obstacles'
  // polygons (hardcore), the outlines of the hull and the four leg segments, the lidar hits.
  struct Scene {
    std::vector<std::array<double, 2>> terrain;
    std::vector<std::vector<std::array<float, 2>>> obstacles;
    std::vector<std::array<float, 2>> hull;
    std::array<std::vector<std::array<float, 2>>, 4> legs;
    std::array<std::array<float, 2>, kLidarRays> lidar{};
  };
  Scene scene() const;

 private:
  struct World;
  void build_world();  // terrain, hull, legs, joints: into w_
  void generate_terrain();
  Step advance(const float* action, float* obs);

  bool hardcore_;
  std::string name_;
  std::unique_ptr<detail::Draws> draws_;  // the generator, or Gymnasium's replayed draws
  std::unique_ptr<World> w_;
  int steps_ = 0;
  bool done_ = true;
};

// Gymnasium's scripted walker (BipedalWalkerHeuristics): lifts one leg, puts it down ahead,
// pushes off, swaps. Walks the whole course on some seeds and falls on others (Gymnasium's own
// mean is about 60 over seeds 0-9); tests and benchmarks use it as a policy that moves.
class BipedalWalkerHeuristic {
 public:
  std::array<float, 4> operator()(const float* obs);

 private:
  enum State { kStayOnOneLeg = 1, kPutOtherDown, kPushOff };
  State state_ = kStayOnOneLeg;
  int moving_leg_ = 0, supporting_leg_ = 1;
  double supporting_knee_angle_ = 0.1;
};

}  // namespace distrl::envs
