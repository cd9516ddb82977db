// V-trace (agent/vtrace.h) against an independent reference: tests/support/vtrace_reference.py
// sums the IMPALA paper's eq. 1 forward in NumPy, where vtrace() runs the backward recursion.
// Random trajectories with episode ends mid-rollout (terminations and truncations), importance
// ratios on both sides of the clips, lambda < 1; two planted bugs in the reference (clipping
// removed, the trace running on into the next episode) are shown to be far outside the bound.
// Without lag V-trace reduces to n-step returns (lambda = 1) and to GAE (lambda < 1).
#include "agent/vtrace.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "agent/ppo.h"
#include "tests/support/reference_python.h"

using namespace distrl;
using namespace distrl::agent;

namespace {

struct Trajectory {
  int T = 0, E = 0;
  std::vector<float> log_rhos, rewards, values, bootstrap, truncated_values;
  std::vector<std::uint8_t> terminated, truncated;
  VtraceInput input() const {
    VtraceInput in;
    in.steps = T;
    in.envs = E;
    in.log_rhos = log_rhos.data();
    in.rewards = rewards.data();
    in.values = values.data();
    in.bootstrap = bootstrap.data();
    in.terminated = terminated.data();
    in.truncated = truncated.data();
    in.truncated_values = truncated_values.data();
    return in;
  }
};

// lag: the spread of log pi/mu (0: the behaviour policy is the target policy).
Trajectory random_trajectory(int T, int E, double lag, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Trajectory t;
  t.T = T;
  t.E = E;
  const std::size_t n = static_cast<std::size_t>(T) * E;
  for (std::size_t i = 0; i < n; ++i) {
    t.log_rhos.push_back(static_cast<float>(lag * normal(rng)));
    t.rewards.push_back(normal(rng));
    t.values.push_back(3.0f * normal(rng));
    const float end = u(rng);
    t.terminated.push_back(end < 0.08f);
    t.truncated.push_back(end >= 0.08f && end < 0.14f);
    t.truncated_values.push_back(t.truncated.back() ? 3.0f * normal(rng) : 0.0f);
  }
  for (int e = 0; e < E; ++e) t.bootstrap.push_back(3.0f * normal(rng));
  return t;
}

std::string join(const std::vector<float>& v) {
  std::ostringstream s;
  s.precision(9);
  for (float x : v) s << x << ' ';
  return s.str();
}
std::string join(const std::vector<std::uint8_t>& v) {
  std::ostringstream s;
  for (auto x : v) s << int(x) << ' ';
  return s.str();
}

struct Reference {
  bool ran = false;
  std::string why;
  std::vector<double> vs, adv;
};

Reference reference(const Trajectory& t, const VtraceOptions& o, const std::string& bug = "") {
  char path[] = "/tmp/distrl_vtrace_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  ::close(fd);
  {
    std::ofstream f(path);
    f.precision(17);
    f << t.T << ' ' << t.E << ' ' << o.gamma << ' ' << o.lambda << ' ' << o.rho_bar << ' ' << o.c_bar << ' '
      << o.pg_rho_bar << '\n'
      << join(t.log_rhos) << '\n'
      << join(t.rewards) << '\n'
      << join(t.values) << '\n'
      << join(t.bootstrap) << '\n'
      << join(t.terminated) << '\n'
      << join(t.truncated) << '\n'
      << join(t.truncated_values) << '\n';
  }
  const auto run = distrl::testing::run_reference_python("vtrace_reference.py", std::string(path) + " " + bug, "numpy");
  ::unlink(path);
  Reference r;
  if (!run.ran) {
    r.why = run.why;
    return r;
  }
  EXPECT_EQ(run.code, 0) << run.out;
  std::istringstream lines(run.out);
  std::string line;
  for (auto* out : {&r.vs, &r.adv}) {
    std::getline(lines, line);
    std::istringstream nums(line);
    double x;
    while (nums >> x) out->push_back(x);
  }
  r.ran = r.vs.size() == t.rewards.size() && r.adv.size() == t.rewards.size();
  EXPECT_TRUE(r.ran) << run.out;
  return r;
}

// The largest |a - b| / max(1, |b|).
double worst(const std::vector<float>& a, const std::vector<double>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return w;
}

}  // namespace

TEST(VtraceTest, AgreesWithTheNumpyReferenceOnRandomTrajectoriesAndItsPlantedBugsDoNot) {
  const VtraceOptions cases[] = {
      {0.99, 1.0, 1.0, 1.0, 1.0},  // the paper's defaults
      {0.9, 0.95, 1.0, 1.0, 1.0},  // lambda < 1
      {0.99, 1.0, 2.0, 0.5, 1.5},  // rho_bar > c_bar, a separate pg clip
      {0.97, 0.9, 0.8, 1.2, 0.9},
  };
  int ran = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    for (const auto& o : cases) {
      const Trajectory t = random_trajectory(25, 3, 0.7, seed);
      const VtraceOutput out = vtrace(t.input(), o);
      const Reference ref = reference(t, o);
      if (!ref.ran) GTEST_SKIP() << ref.why;
      ++ran;
      EXPECT_LE(worst(out.vs, ref.vs), 1e-6) << "vs, seed " << seed << " gamma " << o.gamma << " lambda " << o.lambda;
      EXPECT_LE(worst(out.pg_advantages, ref.adv), 1e-6) << "advantages, seed " << seed;
      for (std::size_t i = 0; i < out.q.size(); ++i)  // APPO's advantage is the unweighted one
        ASSERT_NEAR(out.q[i] - t.values[i],
                    out.pg_advantages[i] / std::min(o.pg_rho_bar, std::exp(double(t.log_rhos[i]))),
                    1e-4 * std::max(1.0f, std::abs(out.q[i])));
    }
  }
  EXPECT_EQ(ran, 12);
  // The comparison can fail: the reference with a planted bug is far outside the 1e-6 bound.
  const Trajectory t = random_trajectory(25, 3, 0.7, 7);
  const VtraceOutput out = vtrace(t.input(), cases[0]);
  for (const char* bug : {"no-clip", "boundary"}) {
    const Reference wrong = reference(t, cases[0], bug);
    ASSERT_TRUE(wrong.ran);
    EXPECT_GT(worst(out.vs, wrong.vs), 1e-2) << bug;
  }
}

TEST(VtraceTest, WithoutLagAndLambdaOneTargetsAreNStepReturns) {
  const Trajectory t = random_trajectory(30, 4, 0.0, 11);
  VtraceOptions o;
  o.gamma = 0.95;
  const VtraceOutput out = vtrace(t.input(), o);
  for (int e = 0; e < t.E; ++e) {
    for (int s = 0; s < t.T; ++s) {  // sum the discounted rewards up to the episode's or the trajectory's end
      double ret = 0, discount = 1;
      int k = s;
      for (;; ++k) {
        const std::size_t i = static_cast<std::size_t>(k) * t.E + e;
        ret += discount * t.rewards[i];
        discount *= o.gamma;
        if (t.terminated[i]) break;
        if (t.truncated[i]) {
          ret += discount * t.truncated_values[i];
          break;
        }
        if (k == t.T - 1) {
          ret += discount * t.bootstrap[e];
          break;
        }
      }
      EXPECT_NEAR(out.vs[static_cast<std::size_t>(s) * t.E + e], ret, 1e-5 * std::max(1.0, std::abs(ret)))
          << "step " << s << " env " << e;
    }
  }
}

TEST(VtraceTest, WithoutLagTheAdvantageIsGae) {
  const Trajectory t = random_trajectory(30, 4, 0.0, 12);
  rl::Fragment f;  // the same numbers as PPO's fragment
  f.steps = t.T;
  f.num_envs = t.E;
  f.values = t.values;
  f.terminated = t.terminated;
  f.truncated = t.truncated;
  f.truncated_values = t.truncated_values;
  f.last_values = t.bootstrap;
  VtraceOptions o;
  o.gamma = 0.99;
  o.lambda = 0.95;
  std::vector<float> returns;
  const auto adv = gae(f, t.rewards, o.gamma, o.lambda, &returns);
  const VtraceOutput out = vtrace(t.input(), o);
  for (std::size_t i = 0; i < adv.size(); ++i)
    EXPECT_NEAR(out.vs[i], returns[i], 1e-5 * std::max(1.0f, std::abs(returns[i])));
}

TEST(VtraceTest, RefusesABadShapeAndATruncationWithoutItsValue) {
  Trajectory t = random_trajectory(5, 2, 0.3, 3);
  VtraceInput in = t.input();
  in.steps = 0;
  EXPECT_THROW(vtrace(in, {}), std::invalid_argument);
  in = t.input();
  in.truncated_values = nullptr;
  t.terminated[3] = 0;
  t.truncated[3] = 1;
  EXPECT_THROW(vtrace(in, {}), std::invalid_argument);
  VtraceOptions o;
  o.lambda = 1.5;
  EXPECT_THROW(vtrace(t.input(), o), std::invalid_argument);
}
