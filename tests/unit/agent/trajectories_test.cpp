// Trajectories (agent/trajectories.h): streaming observers' steps assembled into trajectories
// (what each field holds, truncated episodes' final observations, the next observation),
// malformed reports refused by name and counted without touching what was assembled, the
// bounded queue's back-pressure (a parked step, no blocked thread), close(), forget() and the
// readmission of a forgotten observer, resends, the synchronous learners' lockstep (one
// trajectory per observer, held until release()) and trajectories cut at episode ends.
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

void expect_refused(Trajectories& tr, const rl::StepReport& r, const std::string& says) {
  try {
    tr.observe(r);
    ADD_FAILURE() << "accepted: " << says;
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
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
  auto refused = [&](const rl::StepReport& r, const std::string& says) { expect_refused(tr, r, says); };
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
  play(tr, 0, 2, 4);                  // the refused reports changed nothing: the next good step goes on
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

TEST(TrajectoriesTest, AForgottenObserversPartialTrajectoryIsDiscardedAndItsNextStepTakesItBack) {
  Trajectories tr(options());
  play(tr, 1, 0, 3);
  tr.forget(1);
  EXPECT_FALSE(tr.live(1));
  EXPECT_EQ(tr.stats().discarded, 4);
  // It was stopped, not dead: its next step (whatever it carries about the steps the agent gave
  // up on) starts a new trajectory, and no step is counted twice.
  const long long steps = tr.stats().steps;
  ASSERT_EQ(tr.observe(report(1, 7)), Trajectories::Admit::Go);
  EXPECT_TRUE(tr.live(1));
  EXPECT_EQ(tr.stats().readmitted, 1);
  EXPECT_EQ(tr.stats().steps, steps);
  tr.acted(1, reply(7, 7));
  play(tr, 1, 8, 11);
  auto got = tr.pop(1, 1s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].versions, (std::vector<std::int64_t>{7, 8, 9}));
  EXPECT_EQ(got[0].obs[0], 700.0f);
  expect_refused(tr, report(1, 5), "step 5 where 11 was expected");
}

// A resend (its first answer was lost with the connection) of the step the agent took is acted
// on again, not assembled twice; one whose first try never arrived is a step like any other; a
// "resend" with other observations is refused.
TEST(TrajectoriesTest, AResendOfATakenStepIsActedOnAgainAndCountedOnce) {
  Trajectories tr(options());
  play(tr, 0, 0, 2);
  auto again = report(0, 1);
  again.restart = true;
  ASSERT_EQ(tr.observe(again), Trajectories::Admit::Go);
  EXPECT_EQ(tr.stats().resent, 1);
  tr.acted(0, reply(5, 1));  // the answer that reaches the observer this time
  auto next = report(0, 2);
  next.restart = true;  // a resend whose first try never arrived
  ASSERT_EQ(tr.observe(next), Trajectories::Admit::Go);
  EXPECT_EQ(tr.stats().resent, 1);
  tr.acted(0, reply(6, 2));
  play(tr, 0, 3, 4);
  auto got = tr.pop(1, 1s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].versions, (std::vector<std::int64_t>{0, 5, 6}));  // step 1 as acted the second time
  EXPECT_EQ(got[0].rewards, (std::vector<float>{1, 1.1f, 2, 2.1f, 3, 3.1f}));
  auto forged = report(0, 3);
  forged.restart = true;
  forged.obs[0] = 1e6f;
  expect_refused(tr, forged, "a resend of step 3 with other observations");
}

// The synchronous learners: an observer that completes its trajectory waits (held, no thread
// blocked) while the others play on to theirs; the learner takes one from each, and release()
// lets them all act, in turn, with the new weights. A resend of a held step waits in its place.
TEST(TrajectoriesTest, LockstepHoldsEachObserverAtItsTrajectorysEndUntilRelease) {
  auto o = options(/*rollout=*/2, /*queue=*/2);
  o.lockstep = true;
  Trajectories tr(o);
  play(tr, 0, 0, 2);
  int resumed0 = 0, resumed1 = 0;
  EXPECT_EQ(tr.observe(report(0, 2), [&] { ++resumed0; }), Trajectories::Admit::Wait);  // its trajectory is done
  play(tr, 1, 0, 2);  // the other observer plays on meanwhile
  auto again = report(0, 2);
  again.restart = true;
  EXPECT_EQ(tr.observe(again, [&] { resumed0 += 10; }), Trajectories::Admit::Wait);  // waits in its place
  EXPECT_EQ(tr.observe(report(1, 2), [&] { ++resumed1; }), Trajectories::Admit::Wait);
  auto got = tr.pop(2, 1s);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(resumed0 + resumed1, 0);  // learning: nobody acts
  tr.release();
  EXPECT_EQ(resumed0, 10);  // the resend's resume, once
  EXPECT_EQ(resumed1, 1);
  tr.acted(0, reply(1, 2));
  EXPECT_EQ(tr.observe(report(0, 3)), Trajectories::Admit::Go);  // a new round
  // A trajectory no round took (here: nobody popped it) is a round old at the next release:
  // discarded, counted, never learned.
  tr.acted(1, reply(1, 2));
  EXPECT_EQ(tr.observe(report(1, 3)), Trajectories::Admit::Go);
  tr.acted(1, reply(1, 3));
  const long long discarded = tr.stats().discarded;
  EXPECT_EQ(tr.observe(report(1, 4), [] {}), Trajectories::Admit::Wait);
  tr.release();
  EXPECT_EQ(tr.stats().discarded, discarded + 4);
  EXPECT_TRUE(tr.pop(1, 10ms).empty());
}

// REINFORCE's cut: a trajectory ends once every env has ended an episode in it (here env 1 at
// step 1, env 0 at step 3), capped at `rollout` steps.
TEST(TrajectoriesTest, AnEpisodesCutEndsOnceEveryEnvHasEndedAnEpisode) {
  auto o = options(/*rollout=*/10);
  o.cut = TrajectoryOptions::Cut::Episodes;
  Trajectories tr(o);
  for (std::uint64_t t = 0; t <= 4; ++t) {
    auto r = report(0, t, /*truncate_env1=*/t == 2);
    if (t == 4) {
      r.terminated = {1, 0};
      r.episode_returns = {5.0f};
      r.episode_lengths = {4};
    }
    ASSERT_EQ(tr.observe(r), Trajectories::Admit::Go) << t;
    tr.acted(0, reply(0, static_cast<int>(t)));
  }
  auto got = tr.pop(1, 1s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].steps, 4);
  EXPECT_EQ(got[0].next_obs, report(0, 4).obs);
  o.rollout = 2;  // the cap
  Trajectories capped(o);
  play(capped, 0, 0, 3);
  EXPECT_EQ(capped.pop(1, 1s).size(), 1u);
}
