// LunarLander-v2 / LunarLanderContinuous-v2: physics against Newton (free fall), engines,
// the reward formula against the observations, the end conditions (crash -100, rest +100,
// truncation at 1000), Gym's scripted lander, options and bad input, determinism.
#include "envs/lunar_lander.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "envs/cartpole.h"
#include "envs/render.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/error.h"

using namespace distrl::envs;
using distrl::EnvError;

namespace {

float shaping(const float* s) {
  return -100 * std::sqrt(s[0] * s[0] + s[1] * s[1]) - 100 * std::sqrt(s[2] * s[2] + s[3] * s[3]) -
         100 * std::abs(s[4]) + 10 * s[6] + 10 * s[7];
}

struct Episode {
  double ret = 0;
  int steps = 0;
  Step last;
};

Episode run_heuristic(LunarLander& env, std::uint64_t seed, bool continuous) {
  float obs[8];
  env.reset(seed, obs);
  Episode e;
  do {
    e.last = continuous ? env.step(lunar_lander_heuristic_continuous(obs).data(), obs)
                        : env.step(lunar_lander_heuristic(obs), obs);
    e.ret += e.last.reward;
    ++e.steps;
  } while (!e.last.done());
  return e;
}

}  // namespace

TEST(LunarLanderTest, SpacesAndRegistry) {
  auto d = make_env("LunarLander-v2");
  auto c = make_env("LunarLanderContinuous-v2");
  EXPECT_EQ(d->observation_space().dim(), 8);
  EXPECT_EQ(d->action_space().kind, Space::Kind::Discrete);
  EXPECT_EQ(d->action_space().n, 4);
  EXPECT_EQ(c->action_space().kind, Space::Kind::Box);
  EXPECT_EQ(c->action_space().dim(), 2);
  EXPECT_EQ(d->max_episode_steps(), 1000);
  EXPECT_FLOAT_EQ(d->reward_threshold(), 200.0f);
}

TEST(LunarLanderTest, FreeFallAcceleratesAsGravitySays) {
  for (float g : {-10.0f, -5.0f}) {
    LunarLanderOptions o;
    o.gravity = g;
    LunarLander env(o);
    float obs[8];
    env.reset(3, obs);
    // vel.y in the observation is scaled by (H/2)/FPS; each step adds g/FPS to it (the random
    // initial push acts on the first step only, inside reset). The legs' joints pull on the
    // body a little, so single steps deviate by a few percent; the mean must not.
    const float per_step = g / LunarLander::kFps * (LunarLander::kH / 2) / LunarLander::kFps;
    const float vy0 = obs[3];
    for (int i = 0; i < 10; ++i) {
      const float vy = obs[3];
      ASSERT_FALSE(env.step(0, obs).done());
      EXPECT_NEAR(obs[3] - vy, per_step, std::abs(per_step) * 0.1) << "gravity " << g << ", step " << i;
    }
    EXPECT_NEAR((obs[3] - vy0) / 10, per_step, std::abs(per_step) * 0.02) << "gravity " << g;
    EXPECT_EQ(obs[6], 0.0f);
  }
}

TEST(LunarLanderTest, MainEngineSlowsTheDescentAndCostsFuel) {
  LunarLander a, b;
  float oa[8], ob[8];
  a.reset(5, oa);
  b.reset(5, ob);
  ASSERT_EQ(std::memcmp(oa, ob, sizeof(oa)), 0);
  for (int i = 0; i < 20; ++i) {
    const float prev = shaping(oa);
    Step s = a.step(2, oa);
    b.step(0, ob);
    EXPECT_NEAR(s.reward, shaping(oa) - prev - 0.3f, 1e-3) << "step " << i;  // the reward formula, fuel included
  }
  EXPECT_GT(oa[3], ob[3] + 0.1f) << "main engine: vertical speed " << oa[3] << " vs free fall " << ob[3];
  // The side engines turn the lander: left (1) and right (3) spin it opposite ways.
  LunarLander l, r;
  float ol[8], orr[8];
  l.reset(5, ol);
  r.reset(5, orr);
  for (int i = 0; i < 10; ++i) {
    const float prev = shaping(ol);
    Step s = l.step(1, ol);
    EXPECT_NEAR(s.reward, shaping(ol) - prev - 0.03f, 1e-3);
    r.step(3, orr);
  }
  EXPECT_GT(ol[5] - orr[5], 0.05f) << "angular velocity left " << ol[5] << " right " << orr[5];
}

TEST(LunarLanderTest, FallingWithoutEnginesCrashesWithMinus100) {
  LunarLander env;
  for (std::uint64_t seed : {0, 1, 2}) {
    float obs[8];
    env.reset(seed, obs);
    Step s;
    int n = 0;
    do {
      s = env.step(0, obs);
    } while (!s.done() && ++n < 1000);
    EXPECT_TRUE(s.terminated);
    EXPECT_FLOAT_EQ(s.reward, -100.0f);
    EXPECT_THROW(env.step(0, obs), EnvError);  // ended: reset first
  }
}

TEST(LunarLanderTest, GymsScriptedLanderLandsAndCollectsTheBonus) {
  for (bool continuous : {false, true}) {
    LunarLanderOptions o;
    o.continuous = continuous;
    LunarLander env(o);
    int landed = 0;
    double total = 0;
    for (std::uint64_t seed = 0; seed < 10; ++seed) {
      auto e = run_heuristic(env, seed, continuous);
      total += e.ret;
      if (e.last.terminated && e.last.reward == 100.0f) {
        ++landed;
        EXPECT_FALSE(env.awake());  // at rest: Box2D put it to sleep
      }
    }
    EXPECT_GE(landed, 5) << (continuous ? "continuous" : "discrete");
    EXPECT_GT(total / 10, 150.0) << (continuous ? "continuous" : "discrete");
  }
}

TEST(LunarLanderTest, HoveringIsTruncatedAtOneThousandSteps) {
  LunarLander env;
  bool found = false;
  for (std::uint64_t seed = 0; seed < 30 && !found; ++seed) {
    auto e = run_heuristic(env, seed, false);
    if (e.steps == 1000) {
      EXPECT_TRUE(e.last.truncated);
      EXPECT_FALSE(e.last.terminated);
      found = true;
    }
    EXPECT_LE(e.steps, 1000);
  }
  EXPECT_TRUE(found) << "no heuristic episode lasted 1000 steps in 30 seeds";
}

TEST(LunarLanderTest, SameSeedSameTrajectoryAfterManyResets) {
  auto record = [](LunarLander& env, std::uint64_t seed) {
    std::vector<float> trace;
    float obs[8];
    env.reset(seed, obs);
    Rng actions(99);
    for (int i = 0; i < 300; ++i) {
      Step s = env.step(static_cast<int>(actions.uniform() * 4), obs);
      trace.insert(trace.end(), obs, obs + 8);
      trace.push_back(s.reward);
      if (s.done()) break;
    }
    return trace;
  };
  LunarLander env;
  const auto first = record(env, 7);
  for (std::uint64_t s = 0; s < 20; ++s) record(env, s);
  EXPECT_EQ(record(env, 7), first);
  LunarLander other;
  EXPECT_EQ(record(other, 7), first);
  EXPECT_NE(record(other, 8), first);
}

TEST(LunarLanderTest, ContinuousActionsAndBadInput) {
  LunarLanderOptions o;
  o.continuous = true;
  LunarLander env(o);
  float obs[8];
  env.reset(1, obs);
  const float off[2] = {0.0f, 0.0f}, main_half[2] = {0.0001f, 0.0f}, lateral_dead[2] = {-1.0f, 0.5f};
  float prev = shaping(obs);
  Step s = env.step(main_half, obs);  // just above 0: the main engine at 50 %
  EXPECT_NEAR(s.reward, shaping(obs) - prev - 0.3f * 0.5f, 1e-3);
  prev = shaping(obs);
  s = env.step(lateral_dead, obs);  // |lateral| <= 0.5: side engines off; main <= 0: off
  EXPECT_NEAR(s.reward, shaping(obs) - prev, 1e-3);
  const float too_big[2] = {7.0f, -3.0f};  // clipped to [-1, 1]: full main, full left
  prev = shaping(obs);
  s = env.step(too_big, obs);
  EXPECT_NEAR(s.reward, shaping(obs) - prev - 0.3f - 0.03f, 1e-3);
  const float nan[2] = {std::nanf(""), 0.0f};
  EXPECT_THROW(env.step(nan, obs), EnvError);
  EXPECT_THROW(env.step(1, obs), EnvError);  // discrete action on a continuous env
  env.step(off, obs);

  LunarLander d;
  d.reset(1, obs);
  EXPECT_THROW(d.step(4, obs), EnvError);
  EXPECT_THROW(d.step(off, obs), EnvError);
  LunarLanderOptions bad;
  bad.gravity = -13;
  EXPECT_THROW(LunarLander{bad}, EnvError);
  bad.gravity = -10;
  bad.wind_power = 25;
  EXPECT_THROW(LunarLander{bad}, EnvError);
}

TEST(LunarLanderTest, WindPushesTheLanderSideways) {
  LunarLanderOptions calm, windy;
  windy.enable_wind = true;
  windy.wind_power = 20;
  LunarLander a(calm), b(windy);
  float oa[8], ob[8];
  a.reset(4, oa);
  b.reset(4, ob);
  for (int i = 0; i < 40; ++i) {
    a.step(0, oa);
    b.step(0, ob);
  }
  EXPECT_GT(std::abs(oa[2] - ob[2]), 0.01f) << "wind changes the horizontal velocity";
}

TEST(RenderTest, FramesShowTheSceneAndTheGifHasThemAll) {
  LunarLander env;
  float obs[8];
  env.reset(0, obs);
  Frame f;
  draw(env, &f);
  ASSERT_EQ(f.pixels.size(), static_cast<std::size_t>(kFrameWidth * kFrameHeight));
  auto count = [&](std::uint8_t c) { return std::count(f.pixels.begin(), f.pixels.end(), c); };
  EXPECT_GT(count(1), kFrameWidth * 50);  // terrain (white) fills the bottom
  EXPECT_GT(count(4), 300);               // the lander body
  EXPECT_EQ(f.pixels[0], 0);              // sky at the top left

  const std::string path = (std::filesystem::temp_directory_path() / "distrl-render-test.gif").string();
  {
    GifWriter gif(path, f.width, f.height, 4);
    for (int i = 0; i < 5; ++i) {
      env.step(2, obs);
      draw(env, &f);
      gif.add(f);
    }
    EXPECT_EQ(gif.frames(), 5);
    Frame small;
    small.width = 10;
    EXPECT_THROW(gif.add(small), EnvError);
  }
  std::ifstream in(path, std::ios::binary);
  std::string head(6, '\0');
  in.read(head.data(), 6);
  EXPECT_EQ(head, "GIF89a");
  EXPECT_GT(std::filesystem::file_size(path), 1000u);
  std::filesystem::remove(path);

  CartPole cart;
  float c[4];
  cart.reset(1, c);
  draw(cart, &f);
  EXPECT_GT(std::count(f.pixels.begin(), f.pixels.end(), 9), 500);  // the pole
  EXPECT_THROW(GifWriter("/nonexistent-dir/x.gif", 10, 10, 1), EnvError);
}

// Turbulence alone (no wind force) turns the lander: the angular velocity differs from a calm
// run with the same seed, while without turbulence the two runs agree exactly.
TEST(LunarLanderTest, TurbulenceTurnsTheLander) {
  LunarLanderOptions still, turbulent, calm;
  still.enable_wind = turbulent.enable_wind = true;
  still.wind_power = turbulent.wind_power = 0;
  still.turbulence_power = 0;
  turbulent.turbulence_power = 2;
  LunarLander a(still), b(turbulent), c(calm);
  float oa[8], ob[8], oc[8];
  a.reset(5, oa);
  b.reset(5, ob);
  c.reset(5, oc);
  for (int i = 0; i < 30; ++i) {
    a.step(0, oa);
    b.step(0, ob);
    c.step(0, oc);
  }
  EXPECT_GT(std::abs(oa[5] - ob[5]), 1e-3f) << "turbulence changes the angular velocity";
  for (int k = 0; k < 8; ++k) EXPECT_EQ(oa[k], oc[k]) << "wind 0 and turbulence 0 are calm, obs " << k;
}

// Gym's rule: leaving the screen sideways (|x| >= 1) ends the episode with -100, even in the air.
TEST(LunarLanderTest, LeavingTheScreenSidewaysEndsWithMinus100) {
  LunarLanderOptions o;
  o.continuous = true;
  LunarLander env(o);
  float obs[8];
  env.reset(0, obs);
  Step s;
  int n = 0;
  do {  // upright flight: the main engine holds the height, the side engine pushes right
    const float action[2] = {obs[3] < 0 ? 1.0f : -1.0f, obs[4] > 0.05f ? -1.0f : 1.0f};
    s = env.step(action, obs);
  } while (!s.done() && ++n < 1000);
  ASSERT_TRUE(s.terminated) << "still flying after " << n << " steps at x " << obs[0];
  EXPECT_GE(std::abs(obs[0]), 1.0f) << "ended for another reason";
  EXPECT_FLOAT_EQ(s.reward, -100.0f);
  EXPECT_FALSE(obs[6] > 0 || obs[7] > 0) << "legs never touched";
}
