// Pipeline schedules as per-stage action lists, and the verifier that checks one before it runs.
//
//   Schedule s = make_schedule("1f1b", /*stages=*/4, /*microbatches=*/8);  // gpipe, 1f1b, interleaved, zb-h1
//   Plan plan = verify(s, {.max_activations = 4});  // throws ScheduleError naming the problem
//   plan.bubble[stage], plan.peak_activations[stage]  // the ideal figures under the cost model
//
// A schedule has `stages` ranks, each holding `chunks` consecutive model pieces (interleaved
// schedules: chunk c of stage s is virtual stage c * stages + s, Megatron's layout), and
// `microbatches` micro-batches. Each stage runs its list in order. Compute actions: F (forward),
// B (whole backward), or I + W (backward split into the input gradient, which the previous stage
// waits for, and the weight gradient, which nobody waits for: zero-bubble schedules). Transfer
// actions: SF / RF (send / receive a forward activation), SB / RB (send / receive a backward
// gradient). Receives wait; sends never block (the ZeroMQ group's mailboxes buffer them), or,
// with VerifyOptions::sends_block (NCCL's send/recv), a send waits until its receiver has taken
// it, so stages that meet each other at sends deadlock. lower() inserts the
// transfers a compute-only list implies (a receive just before the action that needs it, a send
// just after the action that produces it), so files and generators may leave them out.
//
// Text form (parse_schedule / format_schedule), one line per stage, `#` comments:
//   schedule 1f1b stages 2 chunks 1 microbatches 4
//   stage 0: F0 F1 B0 F2 B1 F3 B2 B3
//   stage 1: F0 B0 F1 B1 F2 B2 F3 B3
// Tokens: F3, B3, I3, W3, SF3, RF3, SB3, RB3, with ".c" for chunk c (F3.1).
//
// Pure functions and values: thread-safe, no torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"

namespace distrl::training::pipeline {

// A schedule that is malformed, cannot run (deadlock, too few micro-batches) or breaks a bound.
class ScheduleError : public Error {
 public:
  using Error::Error;
};

enum class Op : std::uint8_t { F, B, I, W, SendF, RecvF, SendB, RecvB };
const char* op_token(Op op);  // "F", "B", "I", "W", "SF", "RF", "SB", "RB"
bool is_compute(Op op);

struct Action {
  Op op = Op::F;
  int mb = 0;     // micro-batch
  int chunk = 0;  // which of the stage's pieces
  bool operator==(const Action& o) const { return op == o.op && mb == o.mb && chunk == o.chunk; }
};
std::string to_string(const Action& a);  // "F3", "SB2.1"

struct Schedule {
  std::string name;
  int stages = 1;
  int chunks = 1;
  int microbatches = 1;
  std::vector<std::vector<Action>> actions;  // [stage]

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  int stage_of(int vs) const { return vs % stages; }
  int chunk_of(int vs) const { return vs / stages; }
};

// The built-in schedules: "gpipe" (fill-drain: all forwards, then all backwards), "1f1b" (warm-up
// of stages-1-s forwards, then one forward one backward), "interleaved" (Megatron's interleaved
// 1F1B over `chunks` pieces per stage; micro-batches a multiple of stages), "zb-h1" (1F1B's
// memory, backward split into I and W, W deferred to fill the bubbles). Transfers included.
// Throws ScheduleError for an unknown name or bad sizes.
Schedule make_schedule(const std::string& name, int stages, int microbatches, int chunks = 1);
const std::vector<std::string>& schedule_names();

// Adds the transfers a compute-only schedule implies (a no-op on one that has transfers).
Schedule lower(Schedule s);

// Parses the text form; ScheduleError names the line and token that are wrong.
Schedule parse_schedule(const std::string& text);
Schedule load_schedule_file(const std::string& path);
std::string format_schedule(const Schedule& s);

// Relative durations the verifier simulates with (the paper convention: a backward costs two
// forwards, split evenly into I and W).
struct Costs {
  double f = 1, b = 2, i = 1, w = 1;
};

struct VerifyOptions {
  int max_activations = 0;  // per stage: stashed micro-batch activations at once (0: no bound)
  // A send completes only when its receiver takes it (NCCL: rendezvous, matched in order, not by
  // tag); a stage waiting at a send goes no further. Off: sends are buffered (ZeroMQ mailboxes).
  bool sends_block = false;
  Costs costs;
};

// What a schedule does under the cost model, with no transfer time.
struct Plan {
  double makespan = 0;
  std::vector<double> bubble;              // [stage] idle share of the makespan
  std::vector<int> peak_activations;       // [stage] most micro-batch activations held at once
  std::vector<std::vector<double>> start;  // [stage][action] simulated start times
  double mean_bubble() const;
};

// Checks a schedule before anything runs: structure (stage count, micro-batch and chunk ranges,
// every micro-batch forward and backward exactly once per piece, backward after forward, W after
// I, transfers matching compute), then simulates it: a deadlock (every unfinished stage waits for
// a message nobody will send, or with sends_block for a receive nobody will run) is refused
// naming each waiting stage and what it waits for; a stage
// that keeps more than max_activations is refused naming it. Throws ScheduleError.
Plan verify(const Schedule& s, const VerifyOptions& o = {});

// The fill-drain bubble (stages-1)/(microbatches+stages-1).
double theory_bubble(int stages, int microbatches);

}  // namespace distrl::training::pipeline
