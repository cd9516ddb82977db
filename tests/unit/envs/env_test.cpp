// CartPole-v1 against Gym's equations, seeding, the episode boundaries, VecEnv, the registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "envs/cartpole.h"
#include "envs/vec_env.h"

namespace distrl::envs {
namespace {

// From the upright resting state [0, 0, 0, 0], pushing right (force +10):
//   temp     = (F + m_p*l*thetȧ²*sinθ)/M           = 10/1.1                     = 9.0909091
//   θ̈        = (g*sinθ - cosθ*temp)/(l*(4/3 - m_p*cos²θ/M))
//            = -9.0909091/(0.5*(4/3 - 0.1/1.1))                                   = -14.634146
//   ẍ        = temp - m_p*l*θ̈*cosθ/M = 9.0909091 + 0.05*14.634146/1.1            = 9.7560976
// Euler with tau 0.02, positions first with the old velocities:
//   step 1: x = 0, ẋ = 0.19512195, θ = 0, θ̇ = -0.29268293
//   step 2 (right again; θ was 0 so the same accelerations):
//           x = 0.02*0.19512195 = 0.0039024390, ẋ = 0.39024390,
//           θ = 0.02*-0.29268293 = -0.0058536585, θ̇ = -0.58536585
//   step 3 (left, θ = -0.0058536585): x = 0.011707317, ẋ = 0.19520443, θ = -0.017560976,
//           θ̇ = -0.29453263 (evaluated with the same formulas in double precision)
TEST(CartPoleTest, GoldenFirstStepsFromRest) {
  CartPole env;
  std::vector<float> obs(4);
  env.reset(7, obs.data());
  env.set_state({0, 0, 0, 0});
  const double expected[3][4] = {{0.0, 0.1951219512, 0.0, -0.2926829268},
                                 {0.0039024390, 0.3902439024, -0.0058536585, -0.5853658537},
                                 {0.0117073171, 0.1952044315, -0.0175609756, -0.2945326253}};
  const int actions[3] = {1, 1, 0};
  for (int t = 0; t < 3; ++t) {
    Step s = env.step(actions[t], obs.data());
    EXPECT_EQ(s.reward, 1.0f);
    EXPECT_FALSE(s.done());
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(env.state()[i], expected[t][i], 1e-9) << "step " << t << " component " << i;
      EXPECT_EQ(obs[i], static_cast<float>(env.state()[i]));
    }
  }
}

TEST(CartPoleTest, ResetStateIsUniformInFiveHundredths) {
  CartPole env;
  std::vector<float> obs(4);
  for (int seed = 0; seed < 200; ++seed) {
    env.reset(seed, obs.data());
    for (float v : obs) {
      EXPECT_GT(v, -0.05f);
      EXPECT_LT(v, 0.05f);
    }
  }
}

std::vector<float> trajectory(std::uint64_t seed) {
  CartPole env;
  std::vector<float> obs(4), all;
  env.reset(seed, obs.data());
  for (int t = 0; t < 500; ++t) {
    Step s = env.step(t % 3 == 0 ? 0 : 1, obs.data());
    all.insert(all.end(), obs.begin(), obs.end());
    if (s.done()) break;
  }
  return all;
}

TEST(CartPoleTest, SameSeedSameTrajectory) {
  EXPECT_EQ(trajectory(42), trajectory(42));
  EXPECT_NE(trajectory(42), trajectory(43));
}

TEST(CartPoleTest, TerminatesJustPastTheCartLimit) {
  CartPole env;
  std::vector<float> obs(4);
  env.reset(1, obs.data());
  env.set_state({2.4, 0.0, 0.0, 0.0});  // x stays exactly 2.4 this step: not past the limit
  EXPECT_FALSE(env.step(1, obs.data()).terminated);
  env.set_state({2.4, 0.01, 0.0, 0.0});  // x becomes 2.4002
  Step s = env.step(1, obs.data());
  EXPECT_TRUE(s.terminated);
  EXPECT_FALSE(s.truncated);
  EXPECT_EQ(s.reward, 1.0f);  // the last step is rewarded too
  EXPECT_THROW(env.step(1, obs.data()), EnvError);
}

TEST(CartPoleTest, TerminatesPastTwelveDegrees) {
  CartPole env;
  std::vector<float> obs(4);
  const double limit = 12 * 2 * M_PI / 360;
  env.reset(1, obs.data());
  env.set_state({0, 0, limit - 1e-4, 0.0});
  EXPECT_FALSE(env.step(0, obs.data()).terminated);
  env.set_state({0, 0, -limit + 1e-4, -0.1});  // theta moves by -0.002
  EXPECT_TRUE(env.step(0, obs.data()).terminated);
}

TEST(CartPoleTest, TruncatesAtFiveHundredSteps) {
  CartPole env;
  std::vector<float> obs(4);
  env.reset(3, obs.data());
  for (int t = 1; t <= 500; ++t) {
    env.set_state({0, 0, 0, 0});  // hold it upright; only the step counter advances
    Step s = env.step(t % 2, obs.data());
    ASSERT_FALSE(s.terminated);
    ASSERT_EQ(s.truncated, t == 500) << "step " << t;
  }
  EXPECT_THROW(env.step(0, obs.data()), EnvError);
}

TEST(CartPoleTest, RejectsBadActions) {
  CartPole env;
  std::vector<float> obs(4);
  env.reset(1, obs.data());
  EXPECT_THROW(env.step(2, obs.data()), EnvError);
  float cont[1] = {0.5f};
  EXPECT_THROW(env.step(cont, obs.data()), EnvError);
}

TEST(VecEnvTest, MatchesSingleEnvsAndSkipsFinishedOnes) {
  VecEnv venv("CartPole-v1", 3, 100);
  venv.reset_all();
  std::vector<CartPole> singles(3);
  std::vector<std::vector<float>> obs(3, std::vector<float>(4));
  for (int i = 0; i < 3; ++i) singles[i].reset(100 + i, obs[i].data());
  std::vector<int> steps(3, 0);
  std::vector<int> actions(3, 1);  // always right: each falls within a few dozen steps
  while (venv.num_running() > 0) {
    for (int i = 0; i < 3; ++i)
      if (venv.running(i)) {
        for (int k = 0; k < 4; ++k) ASSERT_EQ(venv.obs(i)[k], obs[i][k]);
      }
    std::vector<bool> was(3);
    for (int i = 0; i < 3; ++i) was[i] = venv.running(i);
    venv.step(actions.data());
    for (int i = 0; i < 3; ++i) {
      if (!was[i]) {
        EXPECT_EQ(venv.rewards()[i], 0.0f);
        continue;
      }
      Step s = singles[i].step(1, obs[i].data());
      EXPECT_EQ(venv.terminated()[i], s.terminated);
      ++steps[i];
    }
  }
  for (int n : steps) EXPECT_GT(n, 3);
}

TEST(VecEnvTest, AutoresetKeepsEveryEnvRunning) {
  VecEnv venv("CartPole-v1", 2, 5, /*autoreset=*/true);
  venv.reset_all();
  std::vector<int> actions(2, 0);
  int ends = 0;
  for (int t = 0; t < 200; ++t) {
    venv.step(actions.data());
    ends += venv.terminated()[0] + venv.terminated()[1];
    ASSERT_EQ(venv.num_running(), 2);
  }
  EXPECT_GT(ends, 4);
}

TEST(VecEnvTest, AutoresetKeepsTheFinalObservation) {
  VecEnv venv("CartPole-v1", 1, 9, /*autoreset=*/true);
  CartPole single;
  float obs[4];
  venv.reset_all();
  single.reset(9, obs);  // env 0 is seeded seed + 0
  const int push = 1;
  for (int t = 0; t < 500; ++t) {
    venv.step(&push);
    const Step s = single.step(push, obs);
    if (s.done()) {
      ASSERT_TRUE(venv.terminated()[0]);
      for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(venv.final_obs(0)[k], obs[k]);
      EXPECT_NE(venv.obs(0)[0], obs[0]);  // the row already holds the next episode
      return;
    }
  }
  FAIL() << "pushing right never ended the episode";
}

TEST(EnvRegistryTest, UnknownNameListsTheKnownOnes) {
  EXPECT_EQ(make_env("CartPole-v1")->observation_space().dim(), 4);
  try {
    make_env("CartPole-v0");
    FAIL();
  } catch (const EnvError& e) {
    EXPECT_NE(std::string(e.what()).find("CartPole-v1"), std::string::npos) << e.what();
  }
}

// Issue 45, item 8: a plugin that lists one name twice (the later entry silently replaced the
// earlier) or a "gymnasium:" name (never reachable: make_env gives those to Gymnasium) is
// refused, naming the entry; nothing of it is registered.
TEST(EnvRegistryTest, APluginWithANameTwiceOrAGymnasiumNameIsRefused) {
  const auto refusal = [](const std::string& path) -> std::string {
    try {
      load_env_plugin(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  const std::string twice = refusal(DISTRL_DUPLICATE_NAME_PLUGIN);
  EXPECT_NE(twice.find("lists 'Twice-v0' twice"), std::string::npos) << twice;
  const std::string gym = refusal(DISTRL_GYMNASIUM_NAME_PLUGIN);
  EXPECT_NE(gym.find("lists 'gymnasium:Mine-v0' as a name, but names starting with 'gymnasium:' are Gymnasium's"),
            std::string::npos)
      << gym;
  const auto names = env_names();
  for (const char* n : {"Twice-v0", "Once-v0"}) EXPECT_EQ(std::find(names.begin(), names.end(), n), names.end()) << n;
}

}  // namespace
}  // namespace distrl::envs
