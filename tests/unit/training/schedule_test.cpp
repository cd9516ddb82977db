#include <gtest/gtest.h>

#include <functional>

#include "training/pipeline/schedule.h"

namespace pl = distrl::training::pipeline;

namespace {

// Refused with a ScheduleError whose message contains `what`.
void expect_refused(const std::function<void()>& fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << "not refused; expected: " << what;
  } catch (const pl::ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

pl::VerifyOptions bound(int activations) {
  pl::VerifyOptions o;
  o.max_activations = activations;
  return o;
}

}  // namespace

TEST(ScheduleTest, BuiltInSchedulesVerifyWithTheirKnownBubbleAndMemory) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const pl::Plan g = pl::verify(pl::make_schedule("gpipe", p, m));
      const pl::Plan f = pl::verify(pl::make_schedule("1f1b", p, m));
      const pl::Plan z = pl::verify(pl::make_schedule("zb-h1", p, m));
      const double theory = pl::theory_bubble(p, m);
      for (int s = 0; s < p; ++s) {
        EXPECT_NEAR(g.bubble[s], theory, 1e-9);
        EXPECT_NEAR(f.bubble[s], theory, 1e-9);
        EXPECT_EQ(g.peak_activations[s], m);
        EXPECT_EQ(f.peak_activations[s], std::min(p - s, m));  // 1F1B: at most the stages
        EXPECT_LE(z.peak_activations[s], std::min(p, m));  // ZB-H1: no stage above 1F1B's peak (stage 0)
      }
      // Idle time per stage: ZB-H1's (p-1)(F+I-W) against 1F1B's (p-1)(F+B), a third at F = I = W.
      EXPECT_NEAR(z.mean_bubble() * z.makespan, (p - 1) * 1.0, 1e-9);
      EXPECT_NEAR(f.mean_bubble() * f.makespan, (p - 1) * 3.0, 1e-9);
    }
  }
}

TEST(ScheduleTest, InterleavedBeatsOneFOneBAndNeedsAMultipleOfTheStages) {
  const pl::Plan f = pl::verify(pl::make_schedule("1f1b", 4, 8));
  const pl::Plan i = pl::verify(pl::make_schedule("interleaved", 4, 8, 2));
  EXPECT_LT(i.mean_bubble(), f.mean_bubble());
  EXPECT_EQ(pl::make_schedule("interleaved", 4, 8, 2).virtual_stages(), 8);
  expect_refused([] { pl::make_schedule("interleaved", 4, 6, 2); }, "multiple of the stages (4), given 6");
  expect_refused([] { pl::make_schedule("1f1b", 4, 8, 2); }, "only 'interleaved'");
  expect_refused([] { pl::make_schedule("pipedream", 4, 8); }, "'pipedream' is not known");
}

TEST(ScheduleTest, TextFormRoundTripsAndLowersTransfers) {
  const pl::Schedule s = pl::make_schedule("interleaved", 2, 4, 2);
  const pl::Schedule back = pl::parse_schedule(pl::format_schedule(s));
  EXPECT_EQ(back.actions, s.actions);
  const pl::Schedule compute = pl::parse_schedule(
      "# hand-written\nschedule mine stages 2 chunks 1 microbatches 2\nstage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1 B1\n");
  const pl::Schedule lowered = pl::lower(compute);
  EXPECT_EQ(pl::to_string(lowered.actions[0][1]), "SF0");
  EXPECT_EQ(pl::to_string(lowered.actions[1][0]), "RF0");
  EXPECT_NO_THROW(pl::verify(compute));
  expect_refused([] { pl::parse_schedule("schedule x stages 2 chunks 1 microbatches 2\nstage 0: F0 X1\n"); },
                 "line 2: 'X1': unknown action");
  expect_refused([] { pl::parse_schedule("stage 0: F0\n"); }, "first line must be");
  expect_refused([] { pl::parse_schedule("schedule x stages 2 chunks 1 microbatches 2\nstage 0: F0 B0\n"); },
                 "stage 1 has no 'stage 1:' line");
}

TEST(ScheduleTest, TheVerifierRefusesADeadlockTooFewMicroBatchesAndTheMemoryBound) {
  // Stage 0 waits for B0's gradient before sending F1; stage 1 needs F1 before it runs B0.
  expect_refused([] {
    pl::verify(pl::parse_schedule("schedule bad stages 2 chunks 1 microbatches 2\nstage 0: F0 B0 F1 B1\nstage 1: F0 F1 B0 B1\n"));
  }, "deadlock: stage 0 waits at RB0 (action 2) for stage 1; stage 1 waits at RF1 (action 2) for stage 0");
  // A schedule written for 4 micro-batches, given 2.
  expect_refused([] {
    pl::Schedule s = pl::make_schedule("1f1b", 2, 4);
    s.microbatches = 2;
    pl::verify(s);
  }, "needs at least 3 micro-batches, given 2");
  expect_refused([] { pl::verify(pl::make_schedule("gpipe", 4, 8), bound(4)); },
                 "stage 0 would keep 8 micro-batches' activations at once; the bound (max_activations) is 4");
  EXPECT_NO_THROW(pl::verify(pl::make_schedule("1f1b", 4, 8), bound(4)));
  expect_refused([] {
    pl::verify(pl::parse_schedule("schedule x stages 2 chunks 1 microbatches 2\nstage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1\n"));
  }, "stage 1: micro-batch 1 has no backward");
  expect_refused([] {
    pl::verify(pl::parse_schedule("schedule x stages 2 chunks 1 microbatches 1\nstage 0: B0 F0\nstage 1: F0 B0\n"));
  }, "the backward of 0 comes before its forward");
}
