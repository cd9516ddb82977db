// REINFORCE in one process (no RPC): the agent's actor and learner fed by the observer's own
// loop (tools/local_observer.h), trajectories cut into whole episodes. A fixed seed learns
// CartPole within a bounded number of rounds.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "agent/policy_actor.h"
#include "agent/reinforce.h"
#include "common/error.h"
#include "envs/vec_env.h"
#include "models/policy.h"
#include "observer/observer.h"
#include "tools/local_observer.h"

namespace distrl::agent {
namespace {

TEST(ReinforceTest, RewardsToGoRestartPerSegment) {
  auto g = rewards_to_go({1, 1, 1, 2, 2}, {3, 2}, 0.5);
  std::vector<float> want{1.75f, 1.5f, 1.0f, 3.0f, 2.0f};
  EXPECT_EQ(g, want);
  EXPECT_THROW(rewards_to_go({1, 1}, {3}, 0.5), ProtocolError);
  EXPECT_THROW(rewards_to_go({1, 1}, {1}, 0.5), ProtocolError);
}

// A trajectory of two steps of two envs (time-major), with the given end flags.
rl::Fragment trajectory(int observer, std::vector<float> rewards, std::vector<std::uint8_t> ended) {
  rl::Fragment f;
  f.observer_id = observer;
  f.obs_dim = 1;
  f.num_envs = 2;
  f.steps = static_cast<int>(rewards.size()) / 2;
  f.rewards = rewards;
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    f.obs.push_back(rewards[i] * 10);  // tells the steps apart
    f.actions.push_back(static_cast<std::int32_t>(i % 2));
  }
  f.terminated = ended;
  f.truncated.assign(ended.size(), 0);
  return f;
}

// Whole episodes only: an episode still running at a trajectory's end waits for its end in a
// later one and is then learned whole, in order; another observer's envs are kept apart; a
// dropped observer's unfinished episodes are forgotten, and the episodes it is taken back in the
// middle of are not learned.
TEST(ReinforceTest, TrajectoriesAreCutIntoWholeEpisodesAcrossRounds) {
  EpisodeCutter cut(1);
  // Env 0 ends at step 0 and runs on; env 1 runs through.   [t0e0, t0e1, t1e0, t1e1]
  Episodes e = cut.cut({trajectory(0, {1, 2, 3, 4}, {1, 0, 0, 0})});
  EXPECT_EQ(e.lengths, std::vector<std::int32_t>({1}));
  EXPECT_EQ(e.rewards, std::vector<float>({1}));
  EXPECT_EQ(cut.unfinished_steps(), 3u);
  // Both end in the next one: env 0's episode is steps 3, 5; env 1's 2, 4, 6.
  e = cut.cut({trajectory(0, {5, 6}, {1, 1}), trajectory(1, {7, 8}, {0, 0})});
  EXPECT_EQ(e.lengths, std::vector<std::int32_t>({2, 3}));
  EXPECT_EQ(e.rewards, std::vector<float>({3, 5, 2, 4, 6}));
  EXPECT_EQ(e.obs, std::vector<float>({30, 50, 20, 40, 60}));
  EXPECT_EQ(cut.unfinished_steps(), 2u);  // observer 1's
  cut.forget(1);
  EXPECT_EQ(cut.unfinished_steps(), 0u);
  // Taken back mid-episode: the first end of each env closes an episode whose beginning was not
  // seen, and is not learned; env 1's next one is whole.
  e = cut.cut({trajectory(1, {9, 10, 11, 12}, {1, 0, 0, 1})});
  EXPECT_TRUE(e.lengths.empty());
  e = cut.cut({trajectory(1, {13, 14}, {0, 1})});
  EXPECT_EQ(e.lengths, std::vector<std::int32_t>({1}));
  EXPECT_EQ(e.rewards, std::vector<float>({14}));
  EXPECT_EQ(cut.unfinished_steps(), 2u);  // env 0's 11, 13
}

TEST(ReinforceTest, MalformedRequestsAreRefused) {
  // act bodies: whole observations only.
  EXPECT_EQ(rl::observation_rows({1, 2, 3, 4, 5, 6, 7, 8}, 4), 2);
  EXPECT_THROW(rl::observation_rows({}, 4), ProtocolError);
  EXPECT_THROW(rl::observation_rows({1, 2, 3}, 4), ProtocolError);
  // One request carries one row per env: a flood of rows is refused by name (issue 14, case 7).
  EXPECT_EQ(rl::observation_rows(std::vector<float>(8, 0.f), 4, 2), 2);
  try {
    rl::observation_rows(std::vector<float>(4 << 20, 0.f), 4, 2);
    ADD_FAILURE() << "2^20 rows passed a cap of 2";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("1048576 observation rows in one request; at most 2"), std::string::npos)
        << e.what();
  }
}

TEST(ReinforceTest, ActorAnswersEveryRowWithAValidAction) {
  torch::manual_seed(0);
  PolicyActor actor(models::make_policy("tutorial", {}), torch::kCPU, 4, 1);
  std::vector<float> obs(4 * 5, 0.01f);
  rl::ActReply r = actor.act(obs.data(), 5);
  ASSERT_EQ(r.actions.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(r.actions[i] == 0 || r.actions[i] == 1);
    EXPECT_LT(r.log_probs[i], 0.0f);
    EXPECT_GT(r.log_probs[i], std::log(0.05f));  // an untrained net is near uniform
  }
  EXPECT_THROW(parse_device("tpu"), ConfigError);
}

TEST(ReinforceTest, ImprovesTheRunningRewardOnCartPole) {
  torch::manual_seed(1);
  models::PolicySpec spec;
  PolicyActor actor(models::make_policy("mlp", spec), torch::kCPU, 4, 7);
  Reinforce learner(actor, ReinforceOptions{0.99, 1e-2});
  TrajectoryOptions shape;  // as the agent's REINFORCE intake: until every env has ended an episode
  shape.envs = 4;
  shape.obs_dim = 4;
  shape.rollout = 500;
  shape.cut = TrajectoryOptions::Cut::Episodes;
  tools::LocalObserver observer("CartPole-v1", 11, actor, shape);
  EpisodeCutter cutter(4);
  double first = 0, running = 0;
  int rounds = 0;
  for (; rounds < 150; ++rounds) {
    Episodes r = cutter.cut(observer.next(1));
    ASSERT_GE(r.lengths.size(), 4u);
    const double mean = static_cast<double>(r.steps()) / static_cast<double>(r.lengths.size());  // reward 1 per step
    if (rounds == 0) first = running = mean;
    running = 0.1 * mean + 0.9 * running;
    learner.update(r);
    if (running > 300) break;
  }
  EXPECT_GT(running, 300) << "after " << rounds << " rounds (first round: " << first << ")";
  EXPECT_LT(first, 60);  // it really started from a random policy
}

}  // namespace
}  // namespace distrl::agent

namespace distrl::agent {
namespace {

// The loss REINFORCE minimises, by hand: -sum(log pi(a|s) * G_norm) with returns-to-go G
// normalised to mean 0 and (unbiased) std 1.
TEST(ReinforceTest, LossUsesNormalisedReturnsToGo) {
  torch::manual_seed(2);
  models::PolicySpec spec;
  auto net = models::make_policy("mlp", spec);
  PolicyActor actor(net, torch::kCPU, 4, 3);
  Reinforce learner(actor, ReinforceOptions{0.5, 1e-2});
  Episodes r;
  r.obs = {0.1f, 0, 0, 0, 0, 0.2f, 0, 0, 0, 0, 0.3f, 0};
  r.actions = {0, 1, 1};
  r.rewards = {1, 2, 4};
  r.lengths = {3};
  // G = 1 + 0.5 * (2 + 0.5 * 4), 2 + 0.5 * 4, 4 = 3, 4, 4
  const std::vector<double> G{3, 4, 4};
  const double mean = 11.0 / 3;
  double var = 0;
  for (double x : G) var += (x - mean) * (x - mean) / 2;  // unbiased
  double want = 0;
  {
    torch::NoGradGuard no_grad;
    auto logp = torch::log_softmax(net->forward(torch::tensor(r.obs).view({3, 4})), 1);
    for (int i = 0; i < 3; ++i)
      want -= logp[i][r.actions[i]].item<double>() * (G[i] - mean) / (std::sqrt(var) + 1e-7);  // ReinforceOptions::eps
  }
  EXPECT_NEAR(learner.update(r), want, 1e-5);
}

// An idle observer (no call pending) notices the agent's dropped connection at its polls, long
// before the idle limit, and says "lost the agent" once it has stayed down for the grace; a
// connection that comes back sooner (a stall, a blink) does not end the wait.
TEST(ObserverHostTest, ADroppedAgentConnectionEndsTheWaitUnlessItComesBack) {
  using Clock = std::chrono::steady_clock;
  observer::ObserverHost host;
  std::atomic<bool> lost{false};
  const auto why = [&] { return lost.load() ? std::string("it dropped") : std::string(); };
  std::thread blink([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    lost = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    lost = false;  // back within the grace
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    host.finish();
  });
  EXPECT_TRUE(host.wait(std::chrono::seconds(20), why));
  blink.join();

  observer::ObserverHost gone;
  lost = true;
  const auto t0 = Clock::now();
  try {
    gone.wait(std::chrono::seconds(20), why);  // the idle limit is the fallback
    ADD_FAILURE() << "wait returned normally";
  } catch (const TransportError& e) {
    EXPECT_EQ(std::string(e.what()), "lost the agent: it dropped");
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(s, 3.0);
  EXPECT_LT(s, 15.0);
  observer::ObserverHost finished;
  finished.finish();
  EXPECT_TRUE(
      finished.wait(std::chrono::hours(1), [] { return std::string("it dropped"); }));  // a finished run ends normally
}

}  // namespace
}  // namespace distrl::agent
