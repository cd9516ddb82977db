// A step's measured timeline: each stage's executed actions with their times, gathered on stage
// 0 on one clock, the measured bubble, and the pictures of it (timeline.json, timeline.png).
//
//   const auto all = gather_timelines(*pg, stage.timeline());   // collective; stage 0 gets them
//   measured_bubbles(all.stages);  write_chrome_trace(schedule, all.stages, "timeline.json");
//
// Pure functions except gather_timelines (a collective over the group, on the caller's thread)
// and the writers (files). Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "training/pipeline/schedule.h"
#include "transport/collectives/process_group.h"

namespace distrl::training::pipeline {

// One executed action; times in microseconds of the host's monotonic clock (monotonic_us:
// comparable across the processes of one host only; gather_timelines aligns stages' clocks).
struct TimedAction {
  Action action;
  double start_us = 0, end_us = 0;
};
double monotonic_us();

// Another process's clock against ours, from round trips: at `sent` (our clock) we asked, the
// peer read `peer` on its clock, the answer came back at `back` (ours).
struct ClockSample {
  double sent = 0, peer = 0, back = 0;
};
struct ClockOffset {
  double offset_us = 0;  // the peer's clock minus ours
  double error_us = 0;   // |true offset - offset_us| is at most this
};
// The peer read its clock between sent and back: the middle of the shortest round trip, off by
// at most half of it (Cristian's algorithm). ArgumentError for no samples.
ClockOffset clock_offset(const std::vector<ClockSample>& samples);

// Every stage's timeline of the last step on stage 0 (others get empty lists), each moved onto
// stage 0's clock: stages on different hosts read different monotonic clocks, so stage 0
// measures each one's offset from 8 round trips first (clock_offset). `clock` is the one the
// timeline was measured with. Collective over the group.
struct GatheredTimelines {
  std::vector<std::vector<TimedAction>> stages;
  std::vector<double> clock_error_us;  // [stage] bound on its alignment error (0 for stage 0)
};
GatheredTimelines gather_timelines(transport::ProcessGroup& pg, const std::vector<TimedAction>& mine,
                                   const std::function<double()>& clock = monotonic_us);

// The earliest start and the latest end over all stages' actions (microseconds).
std::pair<double, double> timeline_span(const std::vector<std::vector<TimedAction>>& timelines);

// Measured per-stage bubble of gathered timelines: idle share of the span from the earliest
// action to the latest, across all stages.
std::vector<double> measured_bubbles(const std::vector<std::vector<TimedAction>>& timelines);

// timeline.json in Chrome-trace format (chrome://tracing, Perfetto): one row per stage, a box per
// action, an arrow from each send to its receive. Throws Error when the file cannot be written.
void write_chrome_trace(const Schedule& s, const std::vector<std::vector<TimedAction>>& timelines,
                        const std::string& path);
// The same as a PNG (gnuplot), with timeline.csv beside it; false (said on stderr) without gnuplot.
bool plot_timeline(const std::vector<std::vector<TimedAction>>& timelines, const std::string& csv,
                   const std::string& png);

}  // namespace distrl::training::pipeline
