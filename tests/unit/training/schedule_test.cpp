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
        EXPECT_LE(z.peak_activations[s], std::min(p, m));      // ZB-H1: no stage above 1F1B's peak (stage 0)
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
  expect_refused(
      [] {
        pl::verify(pl::parse_schedule(
            "schedule bad stages 2 chunks 1 microbatches 2\nstage 0: F0 B0 F1 B1\nstage 1: F0 F1 B0 B1\n"));
      },
      "deadlock: stage 0 waits at RB0 (action 2) for stage 1; stage 1 waits at RF1 (action 2) for stage 0");
  // A schedule written for 4 micro-batches, given 2.
  expect_refused(
      [] {
        pl::Schedule s = pl::make_schedule("1f1b", 2, 4);
        s.microbatches = 2;
        pl::verify(s);
      },
      "needs at least 3 micro-batches, given 2");
  expect_refused([] { pl::verify(pl::make_schedule("gpipe", 4, 8), bound(4)); },
                 "stage 0 would keep 8 micro-batches' activations at once; the bound (max_activations) is 4");
  EXPECT_NO_THROW(pl::verify(pl::make_schedule("1f1b", 4, 8), bound(4)));
  expect_refused(
      [] {
        pl::verify(pl::parse_schedule(
            "schedule x stages 2 chunks 1 microbatches 2\nstage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1\n"));
      },
      "stage 1: micro-batch 1 has no backward");
  expect_refused(
      [] {
        pl::verify(pl::parse_schedule("schedule x stages 2 chunks 1 microbatches 1\nstage 0: B0 F0\nstage 1: F0 B0\n"));
      },
      "the backward of 0 comes before its forward");
}

// Every rule of the verifier refuses by name (each case fails when its check is taken out).
// Schedules with transfers are checked as written; compute-only ones get theirs inserted.
TEST(ScheduleTest, TheVerifierRefusesEachRuleByName) {
  struct Case {
    std::string rule;
    std::function<pl::Schedule()> schedule;
    std::string message;
  };
  auto text = [](const std::string& stages) {
    return [stages] { return pl::parse_schedule("schedule x stages 2 chunks 1 microbatches 1\n" + stages); };
  };
  auto resized = [](int stages, int microbatches, int chunks, bool drop_a_list = false) {
    return [=] {
      pl::Schedule s = pl::make_schedule("1f1b", 2, 2);
      s.stages = stages;
      s.microbatches = microbatches;
      s.chunks = chunks;
      if (drop_a_list) s.actions.pop_back();
      return s;
    };
  };
  const std::vector<Case> cases = {
      {"stage count", resized(0, 2, 1), "stages must be 1..1024, got 0"},
      {"stage lists", resized(2, 2, 1, true), "has lists for 1 stages, declares 2"},
      {"micro-batch count", resized(2, 0, 1), "micro-batches must be >= 1, got 0"},
      {"chunk count", resized(2, 2, 65), "chunks per stage must be 1..64, got 65"},
      {"negative micro-batch", text("stage 0: F0 F-1 B0\nstage 1: F0 B0\n"), "stage 0: F-1: negative micro-batch"},
      {"chunk range", text("stage 0: F0 B0 F0.1\nstage 1: F0 B0\n"), "0.1: chunk 1 is not in 0..0"},
      {"duplicate action", text("stage 0: F0 F0 B0\nstage 1: F0 B0\n"), "stage 0: F0 appears twice"},
      {"forward never run", text("stage 0: F0 B0\nstage 1: B0\n"), "stage 1: micro-batch 0 is never run forward (F0)"},
      {"B together with I/W", text("stage 0: F0 SF0 RB0 B0\nstage 1: RF0 F0 B0 I0 W0 SB0\n"),
       "stage 1: micro-batch 0 has both B and I/W"},
      {"W before I", text("stage 0: F0 B0\nstage 1: F0 W0 I0\n"), "stage 1: W0 comes before I0"},
      {"transfer with no neighbour", text("stage 0: RF0 F0 SF0 RB0 B0\nstage 1: RF0 F0 B0 SB0\n"),
       "stage 0: RF0: this piece has no neighbour there to talk to"},
      {"transfer missing", text("stage 0: F0 RB0 B0\nstage 1: RF0 F0 B0 SB0\n"), "stage 0: SF0 is missing"},
      {"receive after the action it serves", text("stage 0: F0 SF0 RB0 B0\nstage 1: F0 RF0 B0 SB0\n"),
       "stage 1: RF0 must come before the action it serves"},
      {"send before the action it serves", text("stage 0: SF0 F0 RB0 B0\nstage 1: RF0 F0 B0 SB0\n"),
       "stage 0: SF0 must come after the action it serves"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rule);
    expect_refused([&] { pl::verify(c.schedule()); }, c.message);
  }
}

// With blocking sends (NCCL's send/recv: a send completes only when its peer receives it, in
// the order sent) a stage waiting at a send holds up its receives. 1F1B on two stages: stage 0
// sends F1 while stage 1 sends B0's gradient; each waits for the other to receive. GPipe, whose
// sends all meet a waiting receive, still runs; with mailboxes (sends never block) both run.
TEST(ScheduleTest, WithBlockingSendsTheVerifierRefusesWhatWouldDeadlock) {
  pl::VerifyOptions blocking;
  blocking.sends_block = true;
  expect_refused([&] { pl::verify(pl::make_schedule("1f1b", 2, 2), blocking); },
                 "deadlock: stage 0 waits at SF1 (action 3) for stage 1 to receive it; stage 1 waits at SB0 (action 3) "
                 "for stage 0 to receive it (sends block until received");
  EXPECT_NO_THROW(pl::verify(pl::make_schedule("1f1b", 2, 2)));
  for (int p : {2, 3, 4}) {
    const pl::Plan g = pl::verify(pl::make_schedule("gpipe", p, 2 * p), blocking);
    for (int s = 0; s < p; ++s) EXPECT_NEAR(g.bubble[s], pl::theory_bubble(p, 2 * p), 1e-9) << "p=" << p;
  }
}
