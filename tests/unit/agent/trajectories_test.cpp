// Trajectories (agent/trajectories.h): streaming observers' steps assembled into trajectories
// (what each field holds, truncated episodes' final observations, the next observation),
// malformed reports refused by name and counted without touching what was assembled, the
// bounded queue's back-pressure (a parked step, no blocked thread), close() and forget().
#include "agent/trajectories.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

#include "common/error.h"

using namespace distrl;
using namespace distrl::agent;
using namespace std::chrono_literals;

namespace {

TrajectoryOptions options(int rollout = 3, int queue = 4) {
  TrajectoryOptions o;
  o.observers = 2;
  o.envs = 2;
  o.obs_dim = 2;
  o.rollout = rollout;
  o.queue = queue;
  return o;
}

// Observer `id`'s report for step `t`: observations 100 t + 10 e + d, rewards t + e / 10.
rl::StepReport report(int id, std::uint64_t t, bool truncate_env1 = false) {
  rl::StepReport r;
  r.observer_id = id;
  r.step = t;
  for (int e = 0; e < 2; ++e)
    for (int d = 0; d < 2; ++d) r.obs.push_back(100.0f * t + 10.0f * e + d);
  if (t == 0) return r;
  r.rewards = {static_cast<float>(t), t + 0.1f};
  r.terminated = {0, 0};
  r.truncated = {0, static_cast<std::uint8_t>(truncate_env1)};
  if (truncate_env1) {
    r.final_obs = {-1.0f, -2.0f};
    r.episode_returns = {42.0f};
    r.episode_lengths = {7};
  }
  r.latency_us = 50;
  return r;
}

rl::ActReply reply(std::int64_t version, int t) {
  rl::ActReply a;
  a.actions = {t % 2, (t + 1) % 2};
  a.log_probs = {-0.5f, -0.7f};
  a.values = {1.0f, 2.0f};
  a.version = version;
  return a;
}

// Steps 0..n-1 of observer id, each answered at version = step.
void play(Trajectories& tr, int id, int from, int to, int truncate_at = -1) {
  for (int t = from; t < to; ++t) {
    ASSERT_EQ(tr.observe(report(id, static_cast<std::uint64_t>(t), t == truncate_at)), Trajectories::Admit::Go);
    tr.acted(id, reply(t, t));
  }
}

}  // namespace

TEST(TrajectoriesTest, StepsBecomeTrajectoriesOfRolloutStepsWithTheirNextObservation) {
  Trajectories tr(options());
  play(tr, 1, 0, 4, /*truncate_at=*/2);  // steps 0,1,2 complete when 1,2,3 report; 3's obs is next_obs
  auto got = tr.pop(1, 1s);
  ASSERT_EQ(got.size(), 1u);
  const rl::Fragment& f = got[0];
  EXPECT_EQ(f.observer_id, 1);
  EXPECT_EQ(f.steps, 3);
  EXPECT_EQ(f.num_envs, 2);
  ASSERT_EQ(f.obs.size(), 3u * 2 * 2);
  EXPECT_EQ(f.obs[0], 0.0f);    // step 0, env 0
  EXPECT_EQ(f.obs[6], 110.0f);  // step 1, env 1, dim 0
  EXPECT_EQ(f.next_obs, report(1, 3).obs);
  EXPECT_EQ(f.versions, (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(f.actions, (std::vector<std::int32_t>{0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(f.rewards, (std::vector<float>{1, 1.1f, 2, 2.1f, 3, 3.1f}));  // step t's outcome arrives with t + 1
  EXPECT_EQ(f.truncated, (std::vector<std::uint8_t>{0, 0, 0, 1, 0, 0}));  // reported with step 2: step 1's outcome
  EXPECT_EQ(f.final_obs, (std::vector<float>{-1.0f, -2.0f}));
  EXPECT_EQ(f.episode_returns, (std::vector<float>{42.0f}));
  EXPECT_EQ(f.latency_us.size(), 3u);
  const auto s = tr.stats();
  EXPECT_EQ(s.steps, 6);
  EXPECT_EQ(s.queued, 1);
  EXPECT_EQ(s.refused, 0);
}

TEST(TrajectoriesTest, MalformedReportsAreRefusedNamingTheObserverAndChangeNothing) {
  Trajectories tr(options());
  play(tr, 0, 0, 2);
  auto refused = [&](rl::StepReport r, const std::string& says) {
    try {
      tr.observe(r);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  auto r = report(0, 2);
  r.obs.pop_back();
  refused(r, "act from observer 0: 3 observation floats; 2 envs x 2 expected");
  r = report(0, 2);
  r.rewards[1] = std::nanf("");
  refused(r, "reward nan of env 1");
  refused(report(0, 5), "step 5 where 2 was expected");
  refused(report(0, 1), "step 1 where 2 was expected");
  r = report(0, 2);
  r.observer_id = 7;
  refused(r, "observer id 7 is not one of this run's 0..1");
  r = report(0, 2, true);
  r.final_obs.pop_back();
  refused(r, "1 final-observation floats for 1 truncated episodes");
  r = report(0, 2);
  r.terminated[0] = 2;
  refused(r, "not 0 or 1");
  r = report(0, 2);
  r.episode_returns = std::vector<float>(1000, 500.0f);  // invented episodes (would "solve" the run)
  r.episode_lengths = std::vector<std::int32_t>(1000, 1);
  refused(r, "1000 episode returns and 1000 lengths for 0 episodes that ended");
  r = report(0, 2);
  r.latency_us = std::numeric_limits<float>::infinity();
  refused(r, "is not a round trip");
  refused(report(1, 1), "act from observer 1: step 1 where 0 was expected");
  r = report(1, 0);
  r.rewards = {1, 2};
  refused(r, "outcomes in the first step");
  EXPECT_EQ(tr.stats().refused, 10);  // the out-of-range id is refused before a slot is found
  play(tr, 0, 2, 4);  // the refused reports changed nothing: the next good step goes on
  ASSERT_EQ(tr.pop(1, 1s).size(), 1u);
  // A step sent before the answer to the previous one.
  ASSERT_EQ(tr.observe(report(1, 0)), Trajectories::Admit::Go);
  refused(report(1, 1), "a step before the answer to the previous one");
}

TEST(TrajectoriesTest, AFullQueueParksTheStepUntilTheLearnerTakesABatchWithoutBlockingAThread) {
  Trajectories tr(options(/*rollout=*/1, /*queue=*/1));
  play(tr, 0, 0, 2);  // one trajectory queued: full
  int resumed = 0;
  // Completes a second trajectory: no room, so the step is parked and observe() returns at once.
  EXPECT_EQ(tr.observe(report(0, 2), [&] { ++resumed; }), Trajectories::Admit::Wait);
  EXPECT_EQ(resumed, 0);
  EXPECT_EQ(tr.stats().queued, 1);
  std::this_thread::sleep_for(20ms);
  auto got = tr.pop(1, 1s);  // room: the parked one moves in and its step is resumed, here
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(resumed, 1);
  EXPECT_EQ(tr.stats().queued, 2);
  EXPECT_GT(tr.stats().waited_s, 0.015);
  EXPECT_EQ(tr.pop(1, 1s).size(), 1u);  // the parked trajectory, in order
  tr.acted(0, reply(2, 2));
  EXPECT_EQ(tr.observe(report(0, 3), [&] { ++resumed; }), Trajectories::Admit::Go);  // room again
  tr.acted(0, reply(3, 3));
  // While a trajectory waits for room, every other step waits behind it, even one that finishes
  // nothing: acting pauses until the learner takes a batch.
  EXPECT_EQ(tr.observe(report(0, 4), [&] { ++resumed; }), Trajectories::Admit::Wait);  // queue full again
  int other = 0;
  EXPECT_EQ(tr.observe(report(1, 0), [&] { ++other; }), Trajectories::Admit::Wait);
  EXPECT_EQ(tr.pop(1, 1s).size(), 1u);
  EXPECT_EQ(resumed, 2);
  EXPECT_EQ(other, 1);
}

TEST(TrajectoriesTest, CloseResumesAParkedStepDiscardsWhatWaitedAndStopsTheObservers) {
  Trajectories tr(options(1, 1));
  play(tr, 0, 0, 2);
  bool resumed = false;
  EXPECT_EQ(tr.observe(report(0, 2), [&] { resumed = true; }), Trajectories::Admit::Wait);
  tr.close();
  EXPECT_TRUE(resumed);
  EXPECT_EQ(tr.observe(report(1, 0)), Trajectories::Admit::Stop);  // the run is over: reply stop
  EXPECT_EQ(tr.stats().discarded, 4);  // the queued trajectory and the parked one, 2 steps each
  EXPECT_TRUE(tr.pop(1, 10ms).empty());
}

TEST(TrajectoriesTest, AForgottenObserversPartialTrajectoryIsDiscardedAndItsReportsRefused) {
  Trajectories tr(options());
  play(tr, 1, 0, 3);
  tr.forget(1);
  EXPECT_EQ(tr.stats().discarded, 4);
  EXPECT_THROW(tr.observe(report(1, 3)), ProtocolError);
}
