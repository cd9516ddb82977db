// The stage runtime: each rank of a process group holds consecutive pieces of a model and runs
// its list of a verified Schedule, sending activations forward and gradients backward straight
// to the neighbouring stage (point-to-point; nobody in the middle).
//
//   auto pieces = split_sequential(model, {"conv2", "fc1"});              // 3 pieces, every rank
//   PipelineStage stage(pg, {pieces[pg->rank()]}, make_schedule("1f1b", 3, 8));
//   opt.zero_grad();
//   StepStats st = stage.step(images, labels, cross_entropy);  // images on stage 0, labels on the last
//   opt.step();                                                // each stage steps its own piece
//
// Micro-batches: a batch of N rows becomes schedule.microbatches micro-batches of ceil(N/m) rows,
// the last one what is left (microbatch_sizes). The loss of each micro-batch is weighted by its
// share of the batch, so gradients and the reported loss are those of the whole batch's mean loss,
// as in one process.
//
// Backward: B runs the whole backward of a micro-batch; I and W (zero-bubble schedules) split it:
// I computes the gradient of the piece's input (sent at once) and of each child module's output,
// W the children's weight gradients from those, one child at a time. With recompute on, a stage
// keeps only each micro-batch's input and runs the forward again at backward (children must be
// deterministic: no dropout; batch norm's running statistics see the forward twice).
//
// An input gradient autograd leaves undefined (the piece's output does not depend on its input)
// is sent as zeros: the stages before then hold zero gradients where one process would leave
// theirs undefined (the same step with plain SGD; not with weight decay or momentum, which an
// optimizer applies to a zero gradient but skips for a missing one).
//
// Sends: the ZeroMQ group buffers them, so a schedule runs as the verifier simulates it with
// sends that never block. NCCL's send completes only when the peer receives it, matched in
// order: on a group whose backend() is "nccl" the stage verifies with sends_block, and refuses
// (ScheduleError, before anything is sent) the schedules whose stages would wait for each other
// at sends -- 1f1b, zb-h1 and interleaved as generated; gpipe runs.
//
// Failure: any error of a step (a dead neighbour, a timeout, a bad tensor) aborts the group, so
// every stage's next wait fails at once naming the stage where it began, and is rethrown as
// PipelineError naming this stage, the step and the action. The group's timeout bounds every
// receive.
//
// Threads: step() runs on the caller's thread and blocks; one step at a time per stage. Not
// thread-safe. The group must have the schedule's stage count as size, rank = stage.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/sequential.h>

#include "training/pipeline/schedule.h"
#include "training/pipeline/timeline.h"
#include "transport/collectives/process_group.h"

namespace distrl::training::pipeline {

class PipelineError : public Error {
 public:
  using Error::Error;
};

struct StageOptions {
  bool recompute = false;   // keep only inputs; forward again at backward
  int max_activations = 0;  // refuse schedules above this (verify's bound; 0: none)
  Costs costs;              // the verifier's cost model (for the ideal bubble it reports)
  // Largest activation or gradient a neighbour may announce; a header above it (or whose
  // dimensions overflow) is refused before anything is allocated.
  std::int64_t max_tensor_bytes = std::int64_t{1} << 32;
};

struct StepStats {
  double loss = std::numeric_limits<double>::quiet_NaN();  // the batch's mean loss (last stage)
  double wall_s = 0;                                       // this stage's step, entry to return
  double compute_s = 0;                                    // time in F, B, I, W
  int peak_activations = 0;                                // micro-batches whose activations this stage held at once
  double bubble() const { return wall_s > 0 ? 1.0 - compute_s / wall_s : 0; }
};

using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

class PipelineStage {
 public:
  // pieces[c] is chunk c of this stage (virtual stage c * stages + rank). Verifies the schedule
  // (ScheduleError, before anything is sent) and checks the sizes (ArgumentError).
  PipelineStage(std::shared_ptr<transport::ProcessGroup> pg, std::vector<torch::nn::Sequential> pieces,
                Schedule schedule, StageOptions options = {});
  ~PipelineStage();

  // One step over one batch: `inputs` on the stage holding virtual stage 0, `targets` and `loss`
  // (mean over a micro-batch's rows) on the stage holding the last; other stages pass undefined
  // tensors. Gradients accumulate into the pieces' parameters' .grad.
  StepStats step(const at::Tensor& inputs, const at::Tensor& targets, const LossFn& loss);

  // Forward only (evaluation): outputs of the last virtual stage, concatenated, on the stage
  // holding it (undefined elsewhere). No gradients, no schedule: micro-batches flow in order.
  at::Tensor forward(const at::Tensor& inputs);

  const std::vector<TimedAction>& timeline() const { return timeline_; }  // the last step
  const Schedule& schedule() const { return schedule_; }
  const Plan& plan() const { return plan_; }
  int stage() const;
  bool holds_first() const;  // virtual stage 0
  bool holds_last() const;   // the last virtual stage

 private:
  struct Slot;
  void run(const Action& a);
  at::Tensor run_piece(int chunk, const at::Tensor& x, std::vector<at::Tensor>* outs);
  // The forward graph of micro-batch mb's piece (run again from the input under recompute),
  // with the weighted loss as its root on the last virtual stage.
  void build_graph(Slot& s, const Action& a, bool last);
  void input_gradients(Slot& s, int vs, bool last);  // I: the input's and outputs', not the weights'
  void weight_gradients(Slot& s, int chunk);         // W: the weights', from I's
  void send(const at::Tensor& t, int dst, int tag);
  at::Tensor recv(int src, int tag);
  void reap_sends(bool all);

  std::shared_ptr<transport::ProcessGroup> pg_;
  std::vector<torch::nn::Sequential> pieces_;
  Schedule schedule_;
  StageOptions options_;
  Plan plan_;
  bool split_ = false;  // the schedule has I/W

  // per step
  std::vector<at::Tensor> input_mbs_, target_mbs_;
  std::vector<std::int64_t> sizes_;
  std::int64_t rows_ = 0;
  const LossFn* loss_ = nullptr;
  double loss_sum_ = 0;
  int held_ = 0, peak_ = 0;
  int steps_ = 0;                             // steps started, for error messages
  std::vector<std::unique_ptr<Slot>> slots_;  // [mb * chunks + chunk]
  std::vector<std::pair<transport::WorkPtr, at::Tensor>> sends_;
  std::vector<TimedAction> timeline_;
};

// Row counts of N rows split into m micro-batches: ceil(N/m) each, the last one what is left.
// Throws ArgumentError when that does not make m non-empty micro-batches (N=9, m=4), saying
// which counts would.
std::vector<std::int64_t> microbatch_sizes(std::int64_t rows, int microbatches);

// Cuts a Sequential at the named children: {"c", "f"} over (a, b, c, d, f) gives (a, b), (c, d),
// (f). The pieces share the modules (and parameters) with `model`. ArgumentError names a cut that
// is not a child or out of order.
std::vector<torch::nn::Sequential> split_sequential(torch::nn::Sequential model, const std::vector<std::string>& cuts);

// Cuts at the child boundaries that balance `pieces` consecutive parts by the given per-child
// costs (measured forward+backward times): minimises the most expensive part. Returns the cut
// names for split_sequential.
std::vector<std::string> balanced_cuts(torch::nn::Sequential model, const std::vector<double>& child_costs, int pieces);

// Times each child's forward and backward on `sample` (repeats, median), for balanced_cuts.
std::vector<double> measure_child_costs(torch::nn::Sequential model, const at::Tensor& sample, int repeats = 3);

}  // namespace distrl::training::pipeline
