// What a run reports as it goes: OUT_DIR/metrics.csv, one row per round (flushed, so
// `tail -f` follows it; a resumed run appends), the same round as TensorBoard scalars in a new
// event file when `tensorboard` (reward/mean, reward/min, reward/max, reward/running, loss,
// env_steps_per_s, seconds_per_round, episodes, mean_batch), and a progress line on stdout every
// learner.log_interval rounds, at the last round and when solved. Not thread-safe: the
// round loop's thread owns it.
#pragma once

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "agent/batcher.h"
#include "agent/learner.h"
#include "common/event_file.h"
#include "common/output_file.h"

namespace distrl::agent {

class RoundLog {
 public:
  // Opens OUT_DIR/metrics.csv (creating OUT_DIR): appended to when the run resumes (`start`
  // has rounds; rows past its round dropped, and the new event file tells TensorBoard to drop
  // them too: common/output_file.h, common/event_file.h), else written anew with its header.
  // Every row is flushed and checked: OutputError (naming the file and the reason) when a write
  // fails.
  // `lag`: an asynchronous learner's run; its rows and lines also carry the policy lag (mean,
  // max) and the trajectories dropped so far (CSV lag_mean,lag_max,dropped; TensorBoard
  // lag/mean, lag/max, dropped).
  RoundLog(const std::string& out_dir, int log_interval, const Progress& start, bool tensorboard = true,
           bool lag = false);

  // This run's TensorBoard event file; "" without one.
  std::string event_file() const { return events_ ? events_->path() : ""; }

  // One round done: `progress` already counts it; `data.returns` are its episodes' returns
  // (none when no episode ended, e.g. a PPO fragment); `batch` the batcher's totals (null:
  // unbatched, one row per forward).
  void round(const Progress& progress, const RoundData& data, const BatchStats* batch, bool force_print);

 private:
  CsvFile csv_;
  int log_interval_;
  bool lag_;
  std::chrono::steady_clock::time_point last_print_;
  long long steps_at_print_;
  BatchStats batch_at_print_;
  std::unique_ptr<EventFile> events_;
  long long steps_at_row_;
  double seconds_at_row_;
};

}  // namespace distrl::agent
