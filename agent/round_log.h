// What a run reports as it goes: OUT_DIR/metrics.csv, one row per round (flushed, so
// `tail -f` follows it; a resumed run appends), the same row as TensorBoard scalars when
// run.tensorboard (reward/mean, reward/min, reward/max, reward/running, loss, episodes,
// env_steps, seconds, mean_batch, and the rates env_steps_per_s and seconds_per_round), both
// through the run's outputs (run/run_outputs.h, as every training workload writes them), and a
// progress line on stdout every learner.log_interval rounds, at the last round and when solved.
// Not thread-safe: the round loop's thread owns it.
#pragma once

#include <chrono>

#include "agent/batcher.h"
#include "agent/learner.h"
#include "run/run_outputs.h"

namespace distrl::agent {

class RoundLog {
 public:
  // Opens out's metrics.csv: appended to when the run resumes (`start` has rounds; rows past its
  // round dropped, and the new event file tells TensorBoard to drop them too), else written anew
  // with its header. Every row is flushed and checked: OutputError (naming the file and the
  // reason) when a write fails. `out` must outlive the log.
  // `lag`: an asynchronous learner's run; its rows and lines also carry the policy lag (mean,
  // max) and the trajectories dropped so far (CSV lag_mean,lag_max,dropped; TensorBoard
  // lag/mean, lag/max, dropped).
  RoundLog(run::RunOutputs& out, int log_interval, const Progress& start, bool lag = false);

  // One round done: `progress` already counts it; `data.returns` are its episodes' returns
  // (none when no episode ended, e.g. a PPO fragment); `batch` the batcher's totals (null:
  // unbatched, one row per forward).
  void round(const Progress& progress, const RoundData& data, const BatchStats* batch, bool force_print);

 private:
  run::RunOutputs& out_;
  int log_interval_;
  bool lag_;
  std::chrono::steady_clock::time_point last_print_;
  long long steps_at_print_;
  BatchStats batch_at_print_;
};

}  // namespace distrl::agent
