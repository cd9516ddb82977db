// The Actor/Learner seam: make_algorithm builds either algorithm from the config, each keeps
// its own running-reward rule and "solved" test, and a run's checkpoint carries the progress
// and the algorithm's own statistics through save_run / load_run.
#include "agent/learner.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <msgpack.hpp>
#include <torch/types.h>

#include "agent/async_learner.h"
#include "agent/ppo.h"
#include "agent/run_checkpoint.h"
#include "common/error.h"
#include "common/settings.h"
#include "rl/rl_config.h"
#include "tests/support/docs_text.h"

namespace distrl::agent {
namespace {

rl::RlConfig config(const std::string& algo) {
  rl::RlConfig c;
  c.algo = algo;
  c.solved_window = 3;
  return c;
}

// Every key of an RL config is described in the docs (README.md or docs/*.md, in backticks).
TEST(RlConfigTest, EveryKeyIsDocumented) {
  const std::string docs = distrl::testing::documentation_text();
  distrl::Settings settings("distrl-agent");
  distrl::rl::RlConfig config;
  distrl::rl::bind(settings, config);
  for (const auto& key : settings.keys())
    EXPECT_TRUE(distrl::testing::documents_key(docs, key)) << "the RL key " << key << " is in no doc";
}

TEST(LearnerTest, BothAlgorithmsActThroughTheSameSeam) {
  for (const char* algo : {"reinforce", "ppo"}) {
    Algorithm a = make_algorithm(config(algo), 4, 2, 0);
    ASSERT_TRUE(a.actor && a.learner) << algo;
    EXPECT_EQ(a.learner->actor_critic(), std::string(algo) == "ppo") << algo;
    const std::vector<float> obs(3 * 4, 0.1f);
    const auto r = a.actor->act(obs.data(), 3);
    ASSERT_EQ(r.actions.size(), 3u) << algo;
    for (int x : r.actions) EXPECT_TRUE(x == 0 || x == 1) << algo;
    EXPECT_EQ(a.actor->act_eval(obs.data(), 1).actions.size(), 1u) << algo;
  }
  // A continuous env needs PPO, and the config's model must exist.
  EXPECT_THROW(make_algorithm(config("reinforce"), 8, 0, 2), ConfigError);
  auto bad = config("reinforce");
  bad.model = "no-such-model";
  EXPECT_THROW(make_algorithm(bad, 4, 2, 0), ConfigError);
}

TEST(LearnerTest, RunningRewardAndSolvedFollowEachAlgorithmsRule) {
  Algorithm r = make_algorithm(config("reinforce"), 4, 2, 0);
  // REINFORCE: the tutorial's exponential average of each round's mean return.
  EXPECT_DOUBLE_EQ(r.learner->running_reward({10, 30}, 100), 0.05 * 20 + 0.95 * 100);
  EXPECT_DOUBLE_EQ(r.learner->running_reward({}, 7), 7);  // no episode ended: unchanged
  EXPECT_TRUE(r.learner->solved(475, 475));

  Algorithm p = make_algorithm(config("ppo"), 4, 2, 0);
  // PPO: the mean of the last solved_window (3) returns, solved only once that many ended.
  EXPECT_DOUBLE_EQ(p.learner->running_reward({500, 500}, 0), 500);
  EXPECT_FALSE(p.learner->solved(500, 475));                        // two episodes of a window of three
  EXPECT_DOUBLE_EQ(p.learner->running_reward({200, 500}, 0), 400);  // 500, 200, 500
  EXPECT_TRUE(p.learner->solved(400, 400));
}

TEST(LearnerTest, ACheckpointCarriesTheProgressAndTheAlgorithmsOwnState) {
  const auto dir = std::filesystem::temp_directory_path() / ("distrl_learner_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "policy.pt").string();
  Algorithm p = make_algorithm(config("ppo"), 4, 2, 0);
  p.learner->running_reward({100, 200, 300}, 0);
  Progress before;
  before.rounds = 12;
  before.episodes = 34;
  before.env_steps = 5678;
  before.seconds = 9.5;
  before.running_reward = 200;
  save_run(*p.learner, before, path);

  Algorithm q = make_algorithm(config("ppo"), 4, 2, 0);
  const Progress after = load_run(*q.learner, path, config("ppo"));
  EXPECT_EQ(after.rounds, 12);
  EXPECT_EQ(after.episodes, 34);
  EXPECT_EQ(after.env_steps, 5678);
  EXPECT_DOUBLE_EQ(after.seconds, 9.5);
  EXPECT_DOUBLE_EQ(after.running_reward, 200);
  // The recent returns came along: one more return slides the window (200, 300, 400).
  EXPECT_DOUBLE_EQ(q.learner->running_reward({400}, 0), 300);
  EXPECT_TRUE(q.learner->solved(300, 300));

  // A REINFORCE learner cannot load a PPO checkpoint: a ConfigError naming the algorithm.
  Algorithm r = make_algorithm(config("reinforce"), 4, 2, 0);
  try {
    load_run(*r.learner, path, config("reinforce"));
    ADD_FAILURE() << "a PPO checkpoint loaded into REINFORCE";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("saved by a learner.algo ppo run, and this run is reinforce"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// roles.learners 1: the learner process's reply, packed and unpacked as on the wire, installs in
// the agent's AsyncLearner and its actor exactly the learner's weights, observation statistics
// and version; weights for another network are refused, naming the mismatch.
TEST(LearnerTest, ALearnerProcessReplyInstallsExactlyItsWeightsAndRefusesAnotherNetworks) {
  auto cfg = config("appo");
  cfg.ppo.norm_obs = true;
  Algorithm far = make_algorithm(cfg, 4, 2, 0, Role::LearnerProcess);
  Algorithm near = make_algorithm(cfg, 4, 2, 0);
  auto& learner = static_cast<AsyncLearner&>(*far.learner);
  auto& agent = static_cast<AsyncLearner&>(*near.learner);
  // The learner's weights away from the shared initialisation, with statistics of its own.
  rl::PolicyWeights moved = learner.weights();
  for (std::size_t i = 0; i < moved.params.size(); ++i) moved.params[i] += 0.001f * static_cast<float>(i % 97) - 0.04f;
  moved.obs_rms = {0.5, -1.0, 2.0, 0.25, 1.5, 0.75, 3.0, 0.125, 4096.0};
  moved.version = 41;
  learner.install(moved);
  ASSERT_EQ(learner.version(), 41);
  AsyncStats st;
  st.lag_mean = 1.5;
  st.transitions = 1024;
  msgpack::sbuffer wire;
  msgpack::pack(wire, learner.reply(st));
  const auto reply = msgpack::unpack(wire.data(), wire.size()).get().as<rl::LearnReply>();
  EXPECT_EQ(reply.stats.transitions, 1024u);
  EXPECT_DOUBLE_EQ(reply.stats.lag_mean, 1.5);

  agent.install(reply.weights);
  const rl::PolicyWeights got = agent.weights();
  EXPECT_EQ(got.version, 41);
  EXPECT_EQ(got.params, moved.params);
  EXPECT_EQ(got.obs_rms, moved.obs_rms);
  auto& actor = static_cast<PpoActor&>(*near.actor);
  EXPECT_EQ(actor.version(), 41);
  EXPECT_EQ(actor.obs_rms().mean(), (std::vector<double>{0.5, -1.0, 2.0, 0.25}));
  const auto a = actor.net().parameters();
  const auto l = learner.net().parameters();
  ASSERT_EQ(a.size(), l.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], l[i])) << "parameter " << i;

  rl::PolicyWeights other = moved;
  other.params.pop_back();
  try {
    agent.install(other);
    FAIL() << "weights of another network were installed";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("the same config"), std::string::npos) << e.what();
  }
  EXPECT_EQ(agent.version(), 41);  // nothing changed
}

}  // namespace
}  // namespace distrl::agent
