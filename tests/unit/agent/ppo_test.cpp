// PPO pieces: GAE against a hand recursion, running statistics, the actor-critic's Gaussian
// log-probability, the actor's answers, trajectories from a real VecEnv through the observer's
// own loop, and PPO learning CartPole in-process (no RPC) with a fixed seed.
#include "agent/ppo.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>

#include "envs/vec_env.h"
#include "observer/observer.h"
#include "tools/local_observer.h"

using namespace distrl;
using namespace distrl::agent;

namespace {

rl::Fragment tiny_fragment() {
  rl::Fragment f;
  f.steps = 4;
  f.num_envs = 1;
  f.obs_dim = 1;
  f.obs = {0, 0, 0, 0};
  f.actions = {0, 0, 0, 0};
  f.log_probs = {0, 0, 0, 0};
  f.values = {0.5f, 0.4f, 0.3f, 0.2f};
  f.rewards = {1, 2, 3, 4};
  f.terminated = {0, 1, 0, 0};  // episode ends after step 1
  f.truncated = {0, 0, 0, 1};   // and is cut after step 3
  f.last_values = {9.0f};       // never used: step 3 was cut
  f.versions = {0, 0, 0, 0};
  f.next_obs = {0};
  f.final_obs = {0};  // the cut episode's last observation
  return f;
}

}  // namespace

TEST(PpoTest, GaeFollowsTheRecursionWithTerminationAndTruncation) {
  const double g = 0.9, l = 0.8;
  auto f = tiny_fragment();
  std::vector<float> ret;
  auto adv = gae(f, f.rewards, g, l, &ret);
  // By hand, backwards. t=3 truncated: r' = 4 + g*V3, no continuation.
  const double d3 = 4 + g * 0.2 - 0.2, a3 = d3;
  const double d2 = 3 + g * 0.2 - 0.3, a2 = d2 + g * l * a3;  // continues into t=3
  const double d1 = 2 - 0.4, a1 = d1;                         // terminated
  const double d0 = 1 + g * 0.4 - 0.5, a0 = d0 + g * l * a1;
  const std::vector<double> want{a0, a1, a2, a3};
  for (int t = 0; t < 4; ++t) {
    EXPECT_NEAR(adv[t], want[t], 1e-5) << "t=" << t;
    EXPECT_NEAR(ret[t], want[t] + f.values[t], 1e-5);
  }
  f.truncated_values = {0, 0, 0, 7.0f};  // the critic's value of the cut episode's final state
  adv = gae(f, f.rewards, g, l, &ret);
  EXPECT_NEAR(adv[3], 4 + g * 7.0 - 0.2, 1e-5);
  f.truncated_values.clear();
  f.truncated[3] = 0;  // no cut: bootstrap from last_values
  adv = gae(f, f.rewards, g, l, &ret);
  EXPECT_NEAR(adv[3], 4 + g * 9.0 - 0.2, 1e-5);
  f.rewards.pop_back();
  EXPECT_THROW(check_fragment(f, 1, 0), ProtocolError);
}

TEST(PpoTest, RunningMeanStdMatchesTheWholeData) {
  RunningMeanStd rms(2);
  std::vector<float> all;
  for (int chunk = 0; chunk < 5; ++chunk) {
    std::vector<float> x;
    for (int i = 0; i < 7 + chunk; ++i) {
      x.push_back(static_cast<float>(chunk * 3 + i));
      x.push_back(static_cast<float>((i % 3) * -2.0));
    }
    rms.update(x.data(), x.size() / 2);
    all.insert(all.end(), x.begin(), x.end());
  }
  auto t = torch::tensor(all).view({-1, 2}).to(torch::kFloat64);
  EXPECT_NEAR(rms.mean()[0], t.select(1, 0).mean().item<double>(), 1e-3);
  EXPECT_NEAR(rms.var()[1], t.select(1, 1).var(false).item<double>(), 1e-3);
  RunningMeanStd copy(2);
  copy.load(rms.state());
  EXPECT_EQ(copy.mean(), rms.mean());
  EXPECT_THROW(RunningMeanStd(3).load(rms.state()), ConfigError);
}

TEST(PpoTest, GaussianLogProbAndActorAnswers) {
  models::ActorCriticSpec spec;
  spec.obs_dim = 3;
  spec.n_actions = 0;
  spec.action_dim = 2;
  spec.init_log_std = -0.5;
  auto net = std::make_shared<models::ActorCritic>(spec);
  auto x = torch::randn({5, 3});
  auto out = net->forward(x);
  auto a = torch::randn({5, 2});
  auto lp = net->log_prob(out, a);
  const double s = std::exp(-0.5);
  auto z = (a - out.head) / s;
  auto want = (-0.5 * z.pow(2) - std::log(s) - 0.5 * std::log(2 * M_PI)).sum(-1);
  EXPECT_TRUE(torch::allclose(lp, want, 1e-5, 1e-5));

  PpoActor actor(net, torch::kCPU, true, 7);
  std::vector<float> obs(15, 0.5f);
  auto r = actor.act(obs.data(), 5);
  EXPECT_EQ(r.cont_actions.size(), 10u);
  EXPECT_EQ(r.values.size(), 5u);
  EXPECT_TRUE(r.actions.empty());
  r.check(5);
  auto g = actor.act_greedy(obs.data(), 5);
  // Same obs, the mean: equal up to the matrix product's rounding (the wheel's LibTorch 2.x gave
  // two rows of one batch 4.118582e-05 and 4.1185878e-05 once), where a sample would differ by
  // about the standard deviation, 0.6.
  EXPECT_NEAR(g.cont_actions[0], g.cont_actions[2], 1e-6);

  spec.n_actions = 3;
  spec.action_dim = 0;
  PpoActor d(std::make_shared<models::ActorCritic>(spec), torch::kCPU, false, 7);
  auto rd = d.act(obs.data(), 5);
  ASSERT_EQ(rd.actions.size(), 5u);
  for (int v : rd.actions) EXPECT_TRUE(v >= 0 && v < 3);
  EXPECT_THROW(models::ActorCritic(models::ActorCriticSpec{3, 2, 2}), ModelError);
}

TEST(PpoTest, LearnsCartPoleInProcess) {
  torch::manual_seed(3);
  at::set_num_threads(1);
  models::ActorCriticSpec spec;
  spec.obs_dim = 4;
  spec.n_actions = 2;
  PpoActor actor(std::make_shared<models::ActorCritic>(spec), torch::kCPU, true, 11);
  rl::PpoOptions o;
  o.lr = 1e-3;
  o.epochs = 4;
  o.minibatch = 256;
  o.seed = 5;
  Ppo ppo(actor, o);
  TrajectoryOptions shape;
  shape.envs = 8;
  shape.obs_dim = 4;
  shape.rollout = 128;
  tools::LocalObserver observer("CartPole-v1", 100, actor, shape);
  std::deque<float> last;
  const auto start = std::chrono::steady_clock::now();
  long long steps = 0;
  int updates = 0;
  double mean = 0;
  for (; updates < 150; ++updates) {
    auto f = observer.next(1).at(0);
    steps += static_cast<long long>(f.transitions());
    for (float r : f.episode_returns) {
      last.push_back(r);
      if (last.size() > 20) last.pop_front();
    }
    mean = last.empty() ? 0 : std::accumulate(last.begin(), last.end(), 0.0) / last.size();
    if (last.size() == 20 && mean >= 475) break;
    ppo.bootstrap(f);
    ppo.update({f});
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "PPO CartPole in-process: mean of last 20 episodes " << mean << " after " << updates << " updates, "
            << steps << " env steps, " << sec << " s\n";
  EXPECT_GE(mean, 475.0);
}

TEST(PpoTest, MalformedAnswersAndFragmentsAreRefused) {
  envs::VecEnv venv("CartPole-v1", 2, 1, /*autoreset=*/true);
  std::atomic<bool> stop{false};
  // An answer of the wrong kind (continuous actions for a discrete env) and one row short.
  auto continuous = [](const rl::StepReport&) {
    rl::ActReply r;
    r.cont_actions = {0.5f, 0.5f};
    r.log_probs = {-0.7f, -0.7f};
    return r;
  };
  EXPECT_THROW(observer::run_stream(venv, 0, continuous, stop), ProtocolError);
  auto short_reply = [](const rl::StepReport&) {
    rl::ActReply r;
    r.actions = {0};
    r.log_probs = {-0.7f};
    r.values = {0.1f};
    return r;
  };
  EXPECT_THROW(observer::run_stream(venv, 0, short_reply, stop), ProtocolError);

  auto f = tiny_fragment();
  EXPECT_NO_THROW(check_fragment(f, 1, 0, true));
  EXPECT_THROW(check_fragment(f, 2, 0), ProtocolError);  // obs_dim of another env
  EXPECT_THROW(check_fragment(f, 1, 2), ProtocolError);  // continuous env, discrete fragment
  f.last_values.clear();
  EXPECT_NO_THROW(check_fragment(f, 1, 0));  // not bootstrapped yet
  EXPECT_THROW(check_fragment(f, 1, 0, true), ProtocolError);
  f = tiny_fragment();
  f.truncated_values = {0.0f};
  EXPECT_THROW(check_fragment(f, 1, 0, true), ProtocolError);
  f = tiny_fragment();
  f.final_obs.clear();  // the cut episode's final observation missing
  EXPECT_THROW(check_fragment(f, 1, 0), ProtocolError);
  f = tiny_fragment();
  f.versions.pop_back();
  EXPECT_THROW(check_fragment(f, 1, 0), ProtocolError);
  f = tiny_fragment();
  f.cpu_us = std::numeric_limits<double>::infinity();
  EXPECT_THROW(check_fragment(f, 1, 0), ProtocolError);
}

// The loss on three rows, worked out by hand. Ratios 1.5, 0.5, 1.0 with advantages 1, -1, 2
// and clip 0.2: min(r a, clip(r) a) = 1.2, -0.8, 2 -> policy loss -(2.4 / 3) = -0.8.
TEST(PpoTest, LossPiecesMatchAHandComputation) {
  const auto t = [](std::vector<float> v) { return torch::tensor(v); };
  const auto logp = t({std::log(1.5f), std::log(0.5f), 0.0f}), old = t({0, 0, 0});
  const auto adv = t({1, -1, 2});
  const auto value = t({1.0f, 2.0f, 0.0f}), old_value = t({0.5f, 2.5f, 0.0f}), ret = t({2, 1, 1});
  const auto entropy = t({0.6f, 0.9f, 0.3f});
  rl::PpoOptions o;
  o.clip = 0.2;
  o.vf_coef = 0.5;
  o.ent_coef = 0.01;
  o.value_clip = 0;  // unclipped: 0.5 * mean((v - R)^2) = 0.5 * mean(1, 1, 1)
  auto l = ppo_loss(logp, old, adv, value, old_value, ret, entropy, o);
  EXPECT_NEAR(l.policy.item<double>(), -0.8, 1e-6);
  EXPECT_NEAR(l.value.item<double>(), 0.5, 1e-6);
  EXPECT_NEAR(l.entropy.item<double>(), 0.6, 1e-6);
  EXPECT_NEAR(l.total.item<double>(), -0.8 + 0.5 * 0.5 - 0.01 * 0.6, 1e-6);
  // Value clip 0.2 around the old values: clipped = 0.7, 2.3, 0.0; squared errors vs
  // unclipped 1, 1, 1 -> max 1.69, 1.69, 1 -> 0.5 * 4.38 / 3 = 0.73.
  o.value_clip = 0.2;
  l = ppo_loss(logp, old, adv, value, old_value, ret, entropy, o);
  EXPECT_NEAR(l.value.item<double>(), 0.73, 1e-6);
  EXPECT_NEAR(l.total.item<double>(), -0.8 + 0.5 * 0.73 - 0.01 * 0.6, 1e-6);
}

// Reward scaling: rewards 1, 1, 1 on one env with gamma 0.5 give discounted returns 1, 1.5,
// 1.75; each reward is divided by their running std (the statistics start at mean 0, var 1,
// count 1e-4, as in RunningMeanStd).
TEST(PpoTest, RewardScalingDividesByTheStdOfTheDiscountedReturn) {
  rl::Fragment f;
  f.num_envs = 1;
  f.steps = 3;
  f.rewards = {1, 1, 1};
  f.terminated = {0, 0, 0};
  f.truncated = {0, 0, 0};
  RewardScaler s(0.5);
  const auto scaled = s.scale(f);
  const double n0 = 1e-4, n1 = 3, m1 = (1 + 1.5 + 1.75) / 3;
  const double v1 = ((1 - m1) * (1 - m1) + (1.5 - m1) * (1.5 - m1) + (1.75 - m1) * (1.75 - m1)) / 3;
  const double n = n0 + n1, delta = m1 - 0;
  const double var = (1.0 * n0 + v1 * n1 + delta * delta * n0 * n1 / n) / n;  // merged with the prior
  ASSERT_EQ(scaled.size(), 3u);
  for (float r : scaled) EXPECT_NEAR(r, 1 / std::sqrt(var + 1e-8), 1e-4);
  // A second fragment continues the discounted return of the same env (1.75 * 0.5 + 1).
  f.rewards = {1, 0, 0};
  f.terminated = {1, 0, 0};  // the episode ends after the first step: the return restarts
  s.scale(f);
  EXPECT_NEAR(s.return_rms().count(), 1e-4 + 6, 1e-9);
  EXPECT_NEAR(s.return_rms().mean()[0], (1 + 1.5 + 1.75 + 1.875 + 0 + 0) / (6 + 1e-4), 1e-4);
}

// Gradient clipping is applied: with max_grad_norm tiny the update barely moves the weights
// (Adam's eps dominates the clipped gradients), with it huge the same update moves them.
TEST(PpoTest, GradientClippingBoundsTheUpdate) {
  auto moved = [](double max_grad_norm) {
    torch::manual_seed(3);
    models::ActorCriticSpec spec;
    spec.obs_dim = 4;
    spec.n_actions = 2;
    auto net = std::make_shared<models::ActorCritic>(spec);
    PpoActor actor(net, torch::kCPU, false, 11);
    rl::PpoOptions o;
    o.epochs = 1;
    o.minibatch = 64;
    o.max_grad_norm = max_grad_norm;
    Ppo ppo(actor, o);
    TrajectoryOptions shape;
    shape.envs = 4;
    shape.obs_dim = 4;
    shape.rollout = 16;
    tools::LocalObserver observer("CartPole-v1", 100, actor, shape);
    auto f = observer.next(1).at(0);
    ppo.bootstrap(f);
    std::vector<torch::Tensor> before;
    for (const auto& p : net->parameters()) before.push_back(p.detach().clone());
    ppo.update({f});
    double d = 0;
    auto params = net->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) d += (params[i] - before[i]).pow(2).sum().item<double>();
    return std::sqrt(d);
  };
  const double clipped = moved(1e-9), free = moved(1e9);
  EXPECT_GT(free, 0);
  EXPECT_LT(clipped, 0.01 * free) << "clipped " << clipped << " vs unclipped " << free;
}

// GAE over two envs: the arrays are time-major ([step][env]); each env's recursion runs on
// its own column, with its own termination.
TEST(PpoTest, GaeKeepsEnvsApartInTimeMajorArrays) {
  rl::Fragment f;
  f.steps = 2;
  f.num_envs = 2;
  f.values = {0.1f, 0.2f, 0.3f, 0.4f};  // t0e0, t0e1, t1e0, t1e1
  f.rewards = {1, 2, 3, 4};
  f.terminated = {0, 1, 0, 0};  // env 1 ends after step 0
  f.truncated = {0, 0, 0, 0};
  f.last_values = {5.0f, 6.0f};
  const double g = 0.9, l = 0.5;
  std::vector<float> ret;
  auto adv = gae(f, f.rewards, g, l, &ret);
  const double e0_1 = 3 + g * 5.0 - 0.3, e0_0 = (1 + g * 0.3 - 0.1) + g * l * e0_1;
  const double e1_1 = 4 + g * 6.0 - 0.4, e1_0 = 2 - 0.2;  // terminated: no bootstrap, no carry
  const std::vector<double> want{e0_0, e1_0, e0_1, e1_1};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(adv[i], want[i], 1e-5) << "index " << i;
}
