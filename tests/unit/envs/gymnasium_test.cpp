// The classic-control environments against Gymnasium itself (tests/support/gym_reference.py under
// DISTRL_REFERENCE_PYTHON, which `make test` gives gymnasium; skipped, saying why, without it).
// Each episode is played here; before every step Gymnasium's env is set to the same state and
// stepped with the same action, and the observation, reward, terminated and truncated must agree
// (to 1e-6, relative where values are large). Step by step rather than one whole trajectory:
// Acrobot is chaotic, and numpy's sin/cos may differ from libm's by an ulp, which 500 steps
// would amplify; from equal states the dynamics must agree to the last few bits. The time limit
// (Gymnasium's TimeLimit counts the same steps) and the spaces are compared too.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "envs/classic_control.h"
#include "envs/gymnasium_env.h"
#include "envs/random.h"
#include "envs/vec_env.h"
#include "tests/support/multiproc.h"
#include "tests/support/reference_python.h"

namespace {

using namespace distrl::envs;

struct Expected {
  std::vector<float> obs;
  float reward = 0;
  bool terminated = false, truncated = false;
};

struct Episode {
  std::string env;
  int max_steps = 0;
  float threshold = 0;
  bool has_threshold = true;
  std::vector<Expected> steps;
};

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Plays one episode of E from `seed` with policy(obs, t) (an int for a discrete env, a float
// for a continuous one) and appends Gymnasium's commands to `script`.
template <typename E, typename Policy>
Episode play(E& env, std::uint64_t seed, Policy policy, std::string* script) {
  Episode ep{env.name(), env.max_episode_steps(), env.reward_threshold(), true, {}};
  *script += "make " + env.name() + "\n";
  std::vector<float> obs(env.observation_space().dim());
  env.reset(seed, obs.data());
  for (int t = 0;; ++t) {
    *script += "set";
    for (double v : env.state()) *script += " " + number(v);
    const auto action = policy(obs, t);
    *script += "\nstep " + number(action) + "\n";
    Step s;
    if constexpr (std::is_integral_v<decltype(action)>) {
      s = env.step(action, obs.data());
    } else {
      const float a = action;
      s = env.step(&a, obs.data());
    }
    ep.steps.push_back({obs, s.reward, s.terminated, s.truncated});
    if (s.done()) break;
  }
  return ep;
}

// Both sides step in float64 from the same state and round once to float32 (the observation; the
// reward of Pendulum and Acrobot too): their float64 values differ by a few roundings and libm's
// last bit (about 1e-15 of the inputs' scale, at least 1), so the float32 results are equal or
// next to each other. Two float32 ulps of max(1, |b|) (2 * 2^-23) is that, with one to spare.
bool close(double a, double b) { return std::abs(a - b) <= 2 * 0x1p-23 * std::max(1.0, std::abs(b)); }

distrl::testing::PythonRun run_reference(const std::string& script) {
  distrl::testing::TempDir dir;
  std::ofstream(dir.file("commands.txt")) << script;
  return distrl::testing::run_reference_python("gym_reference.py", "< " + dir.file("commands.txt"), "gymnasium");
}

void compare(const std::vector<Episode>& episodes, const std::string& script) {
  const distrl::testing::PythonRun ref = run_reference(script);
  if (!ref.ran) GTEST_SKIP() << ref.why;
  ASSERT_EQ(ref.code, 0) << "the reference script failed: " << ref.out;
  std::istringstream lines(ref.out);
  std::string line;
  for (const Episode& ep : episodes) {
    SCOPED_TRACE(ep.env);
    ASSERT_TRUE(std::getline(lines, line)) << "Gymnasium said nothing more";
    std::istringstream spec(line);
    std::string word, threshold;
    int max_steps = 0;
    spec >> word >> max_steps >> threshold;
    ASSERT_EQ(word, "spec") << line;
    EXPECT_EQ(max_steps, ep.max_steps);
    if (threshold != "none") {
      EXPECT_FLOAT_EQ(std::stof(threshold), ep.threshold);
    }
    for (std::size_t t = 0; t < ep.steps.size(); ++t) {
      SCOPED_TRACE("step " + std::to_string(t + 1));
      ASSERT_TRUE(std::getline(lines, line)) << "Gymnasium said nothing more";
      std::istringstream in(line);
      in >> word;
      ASSERT_EQ(word, "obs") << line;
      const Expected& e = ep.steps[t];
      for (float mine : e.obs) {
        double theirs = 0;
        in >> theirs;
        EXPECT_TRUE(close(mine, theirs)) << "observation " << mine << " vs Gymnasium's " << theirs << ": " << line;
      }
      double reward = 0;
      int terminated = 0, truncated = 0;
      in >> word >> reward >> word >> terminated >> word >> truncated;
      EXPECT_TRUE(close(e.reward, reward)) << "reward " << e.reward << " vs Gymnasium's " << reward;
      EXPECT_EQ(e.terminated, terminated != 0) << line;
      // Gymnasium's TimeLimit also sets truncated on a terminal last step; here terminated wins.
      EXPECT_EQ(e.truncated, truncated != 0 && terminated == 0) << line;
      if (::testing::Test::HasFailure()) return;  // one step's story is enough
    }
  }
}

// Random actions from a seeded generator (out of range too, for the clipping).
struct RandomDiscrete {
  Rng rng;
  int n;
  int operator()(const std::vector<float>&, int) { return static_cast<int>(rng.uniform() * n); }
};
struct RandomBox {
  Rng rng;
  float lo, hi;
  float operator()(const std::vector<float>&, int) { return static_cast<float>(rng.uniform(lo, hi)); }
};

TEST(GymnasiumTest, AcrobotStepsAsGymnasiumDoes) {
  std::string script;
  std::vector<Episode> eps;
  Acrobot env;
  eps.push_back(play(env, 1, RandomDiscrete{Rng(11), 3}, &script));  // random torques: 500 steps, truncated
  // Torque with the second joint's swing pumps energy until the tip clears the line: terminated.
  eps.push_back(play(
      env, 2, [](const std::vector<float>& o, int) { return o[5] > 0 ? 2 : 0; }, &script));
  ASSERT_TRUE(eps[0].steps.back().truncated);
  ASSERT_TRUE(eps[1].steps.back().terminated) << "the swing-up never got there in " << eps[1].steps.size() << " steps";
  compare(eps, script);
}

TEST(GymnasiumTest, MountainCarStepsAsGymnasiumDoes) {
  std::string script;
  std::vector<Episode> eps;
  MountainCar env(false);
  eps.push_back(play(env, 1, RandomDiscrete{Rng(12), 3}, &script));
  eps.push_back(play(
      env, 2, [](const std::vector<float>& o, int) { return o[1] >= 0 ? 2 : 0; }, &script));
  ASSERT_TRUE(eps[0].steps.back().truncated);
  ASSERT_TRUE(eps[1].steps.back().terminated) << "pushing with the velocity never reached the flag";
  compare(eps, script);
}

TEST(GymnasiumTest, MountainCarContinuousStepsAsGymnasiumDoes) {
  std::string script;
  std::vector<Episode> eps;
  MountainCar env(true);
  eps.push_back(play(env, 1, RandomBox{Rng(13), -1.5f, 1.5f}, &script));
  eps.push_back(play(
      env, 2, [](const std::vector<float>& o, int) { return o[1] >= 0 ? 1.0f : -1.0f; }, &script));
  ASSERT_TRUE(eps[0].steps.back().truncated);
  ASSERT_TRUE(eps[1].steps.back().terminated) << "pushing with the velocity never reached the flag";
  compare(eps, script);
}

TEST(GymnasiumTest, PendulumStepsAsGymnasiumDoes) {
  std::string script;
  std::vector<Episode> eps;
  Pendulum env;
  eps.push_back(play(env, 1, RandomBox{Rng(14), -3.0f, 3.0f}, &script));
  eps.push_back(play(
      env, 2, [](const std::vector<float>& o, int) { return o[2] >= 0 ? 2.0f : -2.0f; }, &script));
  ASSERT_EQ(eps[0].steps.size(), 200u);
  ASSERT_TRUE(eps[0].steps.back().truncated);
  compare(eps, script);
}

// Without Gymnasium: the registry makes them, spaces as documented, bad actions refused.
TEST(ClassicControlTest, RegistrySpacesAndRefusals) {
  for (const auto& [name, obs_dim, discrete] :
       std::vector<std::tuple<std::string, int, bool>>{{"Acrobot-v1", 6, true},
                                                       {"MountainCar-v0", 2, true},
                                                       {"MountainCarContinuous-v0", 2, false},
                                                       {"Pendulum-v1", 3, false}}) {
    SCOPED_TRACE(name);
    auto env = make_env(name);
    EXPECT_EQ(env->observation_space().dim(), obs_dim);
    EXPECT_EQ(env->action_space().kind == Space::Kind::Discrete, discrete);
    std::vector<float> obs(obs_dim);
    env->reset(3, obs.data());
    if (discrete) {
      EXPECT_THROW(env->step(7, obs.data()), distrl::EnvError);
      const float a = 0;
      EXPECT_THROW(env->step(&a, obs.data()), distrl::EnvError);
    } else {
      const float nan = std::nanf("");
      EXPECT_THROW(env->step(&nan, obs.data()), distrl::EnvError);
      EXPECT_THROW(env->step(1, obs.data()), distrl::EnvError);
    }
    // Same seed, same first observation.
    std::vector<float> again(obs_dim);
    env->reset(3, again.data());
    EXPECT_EQ(obs, again);
  }
}

}  // namespace

// gymnasium:ID, Gymnasium's own env in a Python child (envs/gymnasium_env.h), under the
// reference Python (`make test` has one with gymnasium); skipped, saying why, without it.
namespace {

// Points DISTRL_GYMNASIUM_PYTHON at the reference Python for this test; puts it back after.
class GymnasiumEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("DISTRL_GYMNASIUM_PYTHON")) old_ = old;
    const char* ref = std::getenv("DISTRL_REFERENCE_PYTHON");
    ::setenv("DISTRL_GYMNASIUM_PYTHON", ref && *ref ? ref : "python3", 1);
  }
  void TearDown() override {
    if (old_.empty()) ::unsetenv("DISTRL_GYMNASIUM_PYTHON");
    else ::setenv("DISTRL_GYMNASIUM_PYTHON", old_.c_str(), 1);
  }
  // make_env(name), or nullptr after GTEST_SKIP when this Python has no gymnasium.
  std::unique_ptr<Env> make_or_skip(const std::string& name) {
    try {
      return make_env(name);
    } catch (const distrl::EnvError& e) {
      if (std::string(e.what()).find("no gymnasium") == std::string::npos) throw;
      skip_why_ = e.what();
      return nullptr;
    }
  }
  std::string old_, skip_why_;
};

TEST_F(GymnasiumEnvTest, StepsGymnasiumsOwnEnvironment) {
  auto env = make_or_skip("gymnasium:CartPole-v1");
  if (!env) GTEST_SKIP() << skip_why_;
  EXPECT_EQ(env->name(), "gymnasium:CartPole-v1");
  EXPECT_EQ(env->action_space().describe(), "Discrete(2)");
  ASSERT_EQ(env->observation_space().dim(), 4);
  EXPECT_FLOAT_EQ(env->observation_space().high[2], 0.41887903f);  // 2 x 12 degrees, as the native one
  EXPECT_EQ(env->max_episode_steps(), 500);
  EXPECT_EQ(env->reward_threshold(), 475.0f);
  std::vector<float> first(4), again(4), obs(4);
  env->reset(7, first.data());
  env->reset(7, again.data());
  EXPECT_EQ(first, again) << "the same seed, the same start";
  for (float v : first) EXPECT_LT(std::abs(v), 0.05f) << "CartPole starts within 0.05";
  // Always pushing right: the pole falls within a few dozen steps, reward 1 per step.
  int steps = 0;
  Step s;
  do {
    s = env->step(1, obs.data());
    EXPECT_EQ(s.reward, 1.0f);
    ++steps;
  } while (!s.done() && steps < 600);
  EXPECT_TRUE(s.terminated);
  EXPECT_FALSE(s.truncated);
  EXPECT_LT(steps, 100);
  EXPECT_THROW(env->step(1, obs.data()), distrl::EnvError) << "a step after the end";
  env->reset(obs.data());
  EXPECT_THROW(env->step(2, obs.data()), distrl::EnvError) << "out of range";
  const float a = 0;
  EXPECT_THROW(env->step(&a, obs.data()), distrl::EnvError) << "a continuous action for a discrete env";
  env->step(0, obs.data());  // still usable after the refusals

  // A Box action, and Gymnasium's own time limit.
  auto pendulum = make_env("gymnasium:Pendulum-v1");
  EXPECT_EQ(pendulum->action_space().describe(), "Box(1)");
  EXPECT_EQ(pendulum->action_space().high[0], 2.0f);
  pendulum->reset(1, obs.data());
  int n = 0;
  do {
    const float torque = 0.5f;
    s = pendulum->step(&torque, obs.data());
    ++n;
    EXPECT_LE(s.reward, 0.0f);
  } while (!s.done());
  EXPECT_EQ(n, 200);
  EXPECT_TRUE(s.truncated);
  pendulum->reset(obs.data());
  const float nan = std::nanf("");
  EXPECT_THROW(pendulum->step(&nan, obs.data()), distrl::EnvError);
  env.reset();
  pendulum.reset();
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "a Python child left unreaped";
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(GymnasiumEnvTest, EveryFailureIsAnEnvErrorThatSaysWhatToDo) {
  auto probe = make_or_skip("gymnasium:CartPole-v1");
  if (!probe) GTEST_SKIP() << skip_why_;
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const distrl::EnvError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { make_env("gymnasium:Nope-v0"); }).find("Gymnasium cannot make 'Nope-v0': NameNotFound"),
            std::string::npos);
  EXPECT_NE(message([] { make_env("gymnasium:Blackjack-v1"); }).find("only a Box is supported"), std::string::npos)
      << "a Tuple observation space";
  EXPECT_NE(message([] { make_env("gymnasium:"); }).find("give a Gymnasium ID"), std::string::npos);

  distrl::testing::TempDir dir;
  ::setenv("DISTRL_GYMNASIUM_PYTHON", dir.file("no-such-python").c_str(), 1);
  EXPECT_NE(message([] { make_env("gymnasium:CartPole-v1"); }).find("cannot start"), std::string::npos);
  ::setenv("DISTRL_GYMNASIUM_PYTHON", "false", 1);  // starts, and exits 1 at once
  EXPECT_NE(message([] { make_env("gymnasium:CartPole-v1"); }).find("exited with status 1"), std::string::npos);
  // A Python that never answers: given up on after the timeout, and killed.
  const std::string silent = dir.file("silent-python");
  std::ofstream(silent) << "#!/bin/sh\nexec sleep 60\n";
  ::chmod(silent.c_str(), 0755);
  ::setenv("DISTRL_GYMNASIUM_PYTHON", silent.c_str(), 1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(message([] { GymnasiumEnv("CartPole-v1", 1, 1); }).find("answered nothing for 1 s"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  probe.reset();
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "a child (the silent one?) was not killed and reaped";
}

// The same episodes through one child for n envs (a VecEnv of gymnasium:ID) as through n
// GymnasiumEnvs: seeds, autoreset, the VecEnv's own time limit cutting some episodes and
// Gymnasium's ending others, final observations, and envs that finished without autoreset.
TEST_F(GymnasiumEnvTest, AVecEnvStepsItsEnvsInOneChildAsSingleEnvsWouldBe) {
  auto probe = make_or_skip("gymnasium:CartPole-v1");
  if (!probe) GTEST_SKIP() << skip_why_;
  for (const bool autoreset : {true, false}) {
    SCOPED_TRACE(autoreset ? "autoreset" : "no autoreset");
    constexpr int kN = 3, kLimit = 15;
    VecEnv venv("gymnasium:CartPole-v1", kN, 7, autoreset, kLimit);
    EXPECT_EQ(venv.action_space().describe(), "Discrete(2)");
    std::vector<std::unique_ptr<Env>> singles;
    std::vector<std::vector<float>> obs(kN, std::vector<float>(4));
    std::vector<int> steps(kN, 0);
    std::vector<bool> running(kN, true);
    venv.reset_all();
    for (int i = 0; i < kN; ++i) {
      singles.push_back(make_env("gymnasium:CartPole-v1"));
      singles[i]->reset(7 + i, obs[i].data());
      for (int k = 0; k < 4; ++k) ASSERT_EQ(venv.obs(i)[k], obs[i][k]) << "env " << i << " is seeded 7 + " << i;
    }
    int ends = 0, cut = 0;
    const auto actions_of = [](int t) {  // the pole falls within ~10-40 steps
      std::vector<int> actions(kN);
      for (int i = 0; i < kN; ++i) actions[i] = (t * 7 + i * 3) % 5 < 3 ? 1 : 0;
      return actions;
    };
    for (int t = 0; t < 60; ++t) {
      const std::vector<int> actions = actions_of(t);
      venv.step(actions.data());
      for (int i = 0; i < kN; ++i) {
        if (!running[i]) {
          EXPECT_EQ(venv.rewards()[i], 0.0f);
          EXPECT_FALSE(venv.running(i));
          continue;
        }
        Step s = singles[i]->step(actions[i], obs[i].data());
        if (++steps[i] == kLimit && !s.terminated) s.truncated = true;
        EXPECT_EQ(venv.rewards()[i], s.reward);
        ASSERT_EQ(venv.terminated()[i] != 0, s.terminated) << "env " << i << " step " << t;
        ASSERT_EQ(venv.truncated()[i] != 0, s.truncated) << "env " << i << " step " << t;
        if (s.done()) {
          ++ends;
          cut += s.truncated;
          steps[i] = 0;
          if (!autoreset) {
            running[i] = false;
            continue;
          }
          for (int k = 0; k < 4; ++k) ASSERT_EQ(venv.final_obs(i)[k], obs[i][k]);
          singles[i]->reset(obs[i].data());
        }
        for (int k = 0; k < 4; ++k) ASSERT_EQ(venv.obs(i)[k], obs[i][k]) << "env " << i << " step " << t;
      }
    }
    EXPECT_GE(ends, kN);
    if (autoreset) {
      EXPECT_GT(cut, 0) << "the VecEnv's time limit cut no episode";
      const int bad[kN] = {0, 2, 0};
      EXPECT_THROW(venv.step(bad), distrl::EnvError) << "env 1's action is out of range";
      try {
        venv.step(actions_of(0).data());
        ADD_FAILURE() << "a step after a failed one";
      } catch (const distrl::EnvError& e) {
        EXPECT_NE(std::string(e.what()).find("call reset_all()"), std::string::npos) << e.what();
      }
      venv.reset_all();
      venv.step(actions_of(0).data());
    } else {
      EXPECT_EQ(venv.num_running(), 0);
    }
  }
  // Continuous actions, and Gymnasium's own time limit.
  VecEnv pendulum("gymnasium:Pendulum-v1", 2, 1, /*autoreset=*/true);
  pendulum.reset_all();
  int truncated = 0;
  for (int t = 0; t < 200; ++t) {
    const float torques[2] = {0.5f, -1.0f};
    pendulum.step(torques);
    truncated += pendulum.truncated()[0] + pendulum.truncated()[1];
  }
  EXPECT_EQ(truncated, 2) << "Pendulum-v1 ends at 200 steps";
  const float nan[2] = {0, std::nanf("")};
  EXPECT_THROW(pendulum.step(nan), distrl::EnvError);
}

// Answers are untrusted: a child that says something else than the protocol, a malformed space,
// a bad flag in the shared buffer or an endless line is refused, naming it, and stopped.
// The children here are shell scripts speaking (or breaking) the protocol: no gymnasium needed.
// They write the buffer (their fd 3) with dd at the offsets the map line gives.
TEST_F(GymnasiumEnvTest, MalformedAnswersAreRefusedAndTheChildStopped) {
  distrl::testing::TempDir dir;
  const std::string made = "read l; echo 'spec 10 inf'; echo 'observation 2 -1 -1 1 1'; echo 'action discrete 2'\n";
  const std::string mapped = made + "read l; set -- $l; terminated=$9; echo ok\n";
  const std::string poke = "printf '\\002' | dd of=/proc/self/fd/3 bs=1 seek=$terminated conv=notrunc 2>/dev/null; ";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"read l; echo hello\n", "an unexpected answer 'hello' (wanted spec)"},
      {"read l; echo 'spec ten inf'\n", "a malformed answer to make"},
      {"read l; echo 'spec 10 inf'; echo 'observation 2 0 x 1 1'\n", "a malformed observation space"},
      {"read l; echo 'spec 10 inf'; echo 'observation 0 0 1'\n", "a malformed observation space"},
      // Sizes the policy could not hold (issue 45): refused before anything is allocated.
      {"read l; echo 'spec 10 inf'; echo 'observation 16777216 0 1'\n",
       "an observation space of 16777216 values, over the 1048576 a policy here is built for"},
      {"read l; echo 'spec 10 inf'; echo 'observation 2 -1 -1 1 1'; echo 'action discrete 1073741824'\n",
       "a Discrete action space of 1073741824 actions, over the 65536 a policy here is built for"},
      {"read l; echo 'spec 10 inf'; echo 'observation 2 -1 -1 1 1'; echo 'action box 100000 0 1'\n",
       "an action space of 100000 values, over the 4096"},
      {"read l; echo 'spec 10 inf'; echo 'observation 2 -1 -1 1 1'; echo 'action discrete -3'\n",
       "a malformed action space"},
      {made + "read l; echo hello\n", "an unexpected answer 'hello' (wanted ok)"},
      {mapped + "read l; echo 'ok 1 2'\n", "a malformed answer to reset"},
      {mapped + "read l; echo ok; read l; " + poke + "echo ok\n",
       "a malformed step answer: gymnasium:Fake-v0's flags are terminated 2, truncated 0 (wanted 0 or 1)"},
      {mapped + "read l; echo ok; read l; echo 'error ValueError: boom'\n", "Gymnasium says: ValueError: boom"},
      {"read l; exec tr '\\0' x < /dev/zero\n", "an answer line over 64 MiB"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    const std::string child = dir.file("child" + std::to_string(i));
    std::ofstream(child) << "#!/bin/sh\n" << cases[i].first << "exec cat > /dev/null\n";
    ::chmod(child.c_str(), 0755);
    ::setenv("DISTRL_GYMNASIUM_PYTHON", child.c_str(), 1);
    std::string message = "no error";
    try {
      // Generous timeouts: each case answers at once, but the endless line is 64 MiB through a
      // socket, which took more than 5 s once beside a parallel build.
      GymnasiumEnv env("Fake-v0", 60, 60);
      std::vector<float> obs(2);
      env.reset(1, obs.data());
      env.step(1, obs.data());
    } catch (const distrl::EnvError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(cases[i].second), std::string::npos) << message;
    int status = 0;
    EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "the child was not stopped and reaped";
  }
}

// The buffer is sealed before it is mapped: a child that shrinks it (which would make our reads
// fault) cannot, and one that writes garbage into it gives garbage observations, nothing worse.
TEST_F(GymnasiumEnvTest, AChildCannotShrinkTheSharedBuffer) {
  distrl::testing::TempDir dir;
  const std::string child = dir.file("child");
  std::ofstream(child) << "#!/bin/sh\n"
                       << "read l; echo 'spec 10 inf'; echo 'observation 2 -1 -1 1 1'; echo 'action discrete 2'\n"
                       << "read l; set -- $l; size=$2; truncate -s 0 /proc/self/fd/3 2>/dev/null; echo ok\n"
                       << "read l; truncate -s 1 /proc/self/fd/3 2>/dev/null; echo ok\n"
                       << "read l; head -c $size /dev/urandom | dd of=/proc/self/fd/3 conv=notrunc 2>/dev/null; "
                          "truncate -s 100000000 /proc/self/fd/3 2>/dev/null; echo ok\n"
                       << "exec cat > /dev/null\n";
  ::chmod(child.c_str(), 0755);
  ::setenv("DISTRL_GYMNASIUM_PYTHON", child.c_str(), 1);
  GymnasiumEnv env("Fake-v0", 10, 10);
  std::vector<float> obs(2, 5.0f);
  env.reset(1, obs.data());
  EXPECT_EQ(obs, std::vector<float>(2, 0.0f)) << "the child wrote no observation: the buffer's zeros";
  try {
    env.step(1, obs.data());  // the flags are random bytes: refused, or read as 0/1
  } catch (const distrl::EnvError& e) {
    EXPECT_NE(std::string(e.what()).find("a malformed step answer"), std::string::npos) << e.what();
  }
}
// A child that answers without reading its requests fills the socket's buffer: our send is timed
// too, and the child is killed.
TEST_F(GymnasiumEnvTest, AChildThatStopsReadingIsGivenUpOn) {
  distrl::testing::TempDir dir;
  const std::string child = dir.file("child");
  std::ofstream(child) << "#!/bin/sh\n"
                       << "read l; echo 'spec 10 inf'; echo 'observation 2 -1 -1 1 1'; echo 'action discrete 2'\n"
                       << "read l; echo ok; read l; echo ok; exec yes ok\n";
  ::chmod(child.c_str(), 0755);
  ::setenv("DISTRL_GYMNASIUM_PYTHON", child.c_str(), 1);
  GymnasiumEnv env("Fake-v0", 1, 10);
  std::vector<float> obs(2);
  env.reset(1, obs.data());
  std::string message = "no error";
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 10000000; ++i) env.step(1, obs.data());
  } catch (const distrl::EnvError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("Gymnasium read nothing for 1 s; killed it"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "the child was not stopped and reaped";
}

}  // namespace
