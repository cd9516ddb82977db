// The measured timeline's arithmetic on a synthetic timeline worked out by hand: the bubble per
// stage, the Chrome trace (read back as JSON: a row per stage, a box per action, an arrow per
// transfer), and another host's clock offset from round trips.
#include <gtest/gtest.h>

#include <map>

#include "tests/support/chrome_trace.h"
#include "tests/support/multiproc.h"
#include "training/pipeline/timeline.h"

namespace pl = distrl::training::pipeline;
using pl::Op;

namespace {

// Two stages, one micro-batch (GPipe), times in microseconds:
//   stage 0: F0 [100, 110]   SF0 [110, 111]  RB0 [111, 140]  B0 [140, 160]
//   stage 1: RF0 [105, 112]  F0 [112, 122]   B0 [122, 138]   SB0 [138, 139]
std::vector<std::vector<pl::TimedAction>> synthetic() {
  auto at = [](Op op, double start, double end) { return pl::TimedAction{pl::Action{op, 0, 0}, start, end}; };
  return {{at(Op::F, 100, 110), at(Op::SendF, 110, 111), at(Op::RecvB, 111, 140), at(Op::B, 140, 160)},
          {at(Op::RecvF, 105, 112), at(Op::F, 112, 122), at(Op::B, 122, 138), at(Op::SendB, 138, 139)}};
}

}  // namespace

TEST(TimelineTest, MeasuredBubbleIsTheIdleShareOfTheSpanOfAllStages) {
  const auto [lo, hi] = pl::timeline_span(synthetic());
  EXPECT_EQ(lo, 100);
  EXPECT_EQ(hi, 160);
  // Over the 60 us span, stage 0 computes 10 + 20 us and stage 1 10 + 16 us; transfers are idle.
  const auto bubbles = pl::measured_bubbles(synthetic());
  ASSERT_EQ(bubbles.size(), 2u);
  EXPECT_DOUBLE_EQ(bubbles[0], 1 - 30.0 / 60);
  EXPECT_DOUBLE_EQ(bubbles[1], 1 - 26.0 / 60);
}

TEST(TimelineTest, ChromeTraceHasARowPerStageABoxPerActionAndAnArrowPerTransfer) {
  distrl::testing::TempDir dir;
  pl::write_chrome_trace(pl::make_schedule("gpipe", 2, 1), synthetic(), dir.file("timeline.json"));
  const auto events = distrl::testing::read_chrome_trace(dir.file("timeline.json"));
  std::map<int, std::string> rows;
  std::map<std::pair<int, std::string>, std::pair<double, double>> boxes;  // (row, action) -> (ts, dur)
  std::map<long, std::vector<distrl::testing::TraceEvent>> arrows;
  for (const auto& e : events) {
    if (e.ph == "M") rows[e.tid] = e.row_name;
    if (e.ph == "X") {
      EXPECT_TRUE(boxes.emplace(std::make_pair(e.tid, e.name), std::make_pair(e.ts, e.dur)).second) << e.name;
      EXPECT_EQ(e.cat, e.name[0] == 'F' || e.name[0] == 'B' ? "compute" : "transfer") << e.name;
    }
    if (e.ph == "s" || e.ph == "f") arrows[e.id].push_back(e);
  }
  EXPECT_EQ(rows, (std::map<int, std::string>{{0, "stage 0"}, {1, "stage 1"}}));
  // Times from the earliest start (100 us).
  const std::map<std::pair<int, std::string>, std::pair<double, double>> want{
      {{0, "F0"}, {0, 10}}, {{0, "SF0"}, {10, 1}}, {{0, "RB0"}, {11, 29}}, {{0, "B0"}, {40, 20}},
      {{1, "RF0"}, {5, 7}}, {{1, "F0"}, {12, 10}}, {{1, "B0"}, {22, 16}},  {{1, "SB0"}, {38, 1}}};
  EXPECT_EQ(boxes, want);
  // An arrow leaves at the send's start and lands on the receiving row at the receive's end.
  std::map<std::string, std::tuple<int, double, int, double>> got;  // send -> (from row, ts, to row, ts)
  for (const auto& [id, ends] : arrows) {
    ASSERT_EQ(ends.size(), 2u) << "arrow " << id;
    const auto& s = ends[0].ph == "s" ? ends[0] : ends[1];
    const auto& f = ends[0].ph == "s" ? ends[1] : ends[0];
    EXPECT_EQ(f.ph, "f");
    got[s.name] = {s.tid, s.ts, f.tid, f.ts};
  }
  EXPECT_EQ(got, (std::map<std::string, std::tuple<int, double, int, double>>{{"SF0", {0, 10.0, 1, 12.0}},
                                                                              {"SB0", {1, 38.0, 0, 40.0}}}));
}

// The peer's clock is ours + 1000 us. First round trip: sent at 0, the peer read 1015 (at our 15),
// back at 20: the middle guess, 1015 - 10 = 1005, is off by 5, within half the round trip (10).
// Second: sent at 100, read 1102, back at 104: 1102 - 102 = 1000, error at most 2. The shorter
// round trip is the one believed.
TEST(TimelineTest, ClockOffsetComesFromTheShortestRoundTrip) {
  const pl::ClockOffset one = pl::clock_offset({{0, 1015, 20}});
  EXPECT_DOUBLE_EQ(one.offset_us, 1005);
  EXPECT_DOUBLE_EQ(one.error_us, 10);
  const pl::ClockOffset best = pl::clock_offset({{0, 1015, 20}, {100, 1102, 104}});
  EXPECT_DOUBLE_EQ(best.offset_us, 1000);
  EXPECT_DOUBLE_EQ(best.error_us, 2);
  EXPECT_THROW(pl::clock_offset({}), distrl::ArgumentError);
}
