// What every training workload's loop does besides its step, written once: the lead rank's
// outputs (run/run_outputs.h, shared with the RL agent: the claim on run.out_dir, config.yaml,
// the CSV appended to on resume, the TensorBoard rows, the learning curve), the progress cadence (run.log_interval), the stop on SIGINT/SIGTERM (agreed the way the ranks
// need it, training/stop_agreement.h), the stop line and the learning curve. The workload
// keeps its step, the text of its lines and its checkpoint format.
//
//   RunLoop loop(cfg, "distrl-train", rank == 0);
//   loop.stop_in_lock_step(*pg, "rank");
//   loop.open(config_yaml, "metrics.csv", "epoch,loss", resume.empty() ? -1 : last_epoch_done);
//   for (...) { ...; if (loop.log_due(step)) print(...); if (loop.stop_requested(step)) break; }
//   loop.row(epoch, loss);  ...  loop.finish({charts});
//
// Lifetime: one per run, on the thread that runs the loop; not thread-safe. No callbacks.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "run/run_outputs.h"
#include "training/run_keys.h"
#include "training/stop_agreement.h"

namespace distrl::transport {
class ProcessGroup;
class Store;
}  // namespace distrl::transport

namespace distrl::training {

// Losses and items (samples, pairs, characters) since the last reset: a progress line's numbers.
struct Window {
  double loss_sum = 0;
  long long steps = 0, items = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void add(double loss, long long n_items = 0) {
    loss_sum += loss;
    ++steps;
    items += n_items;
  }
  double mean_loss() const { return steps > 0 ? loss_sum / static_cast<double>(steps) : 0; }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  double items_per_s() const { return static_cast<double>(items) / seconds(); }
  void reset() { *this = Window{}; }
};

class RunLoop {
 public:
  // tool: the stop line's first words ("distrl-train", "trainer 1"); lead: this rank writes the
  // outputs, claims run.out_dir for the run (common/run_lock.h: ConfigError while another run
  // writes there) and prints progress. Installs the stop handlers (common/stop_signal.h); the run's
  // clock (seconds()) starts here. The stop rule is this process's own signal until one of the
  // stop_* below is called (for ranks whose peers serve on until told, like the RPC masters').
  RunLoop(const RunKeys& run, std::string tool, bool lead);

  // Ranks in lock step (each step is a collective over pg): stop_agreed(pg) every
  // kStopCheckSteps steps, so that all stop after the same one. `peer` words the stop that
  // came from elsewhere: "a signal on another <peer>". pg must outlive the loop.
  void stop_in_lock_step(transport::ProcessGroup& pg, std::string peer);
  // Ranks at their own pace: a StopFlag on the run's store (which must outlive the loop).
  void stop_through(transport::Store& store);

  bool lead() const { return out_.lead(); }
  // The lead's TensorBoard event file, once open() made it; "" otherwise.
  const std::string& event_file() const { return out_.event_file(); }
  const std::string& out_dir() const { return out_.out_dir(); }

  // The lead: writes out_dir/config.yaml and opens out_dir/csv_name with `header`, and with
  // run.tensorboard a new TensorBoard event file holding the same rows as `scalars` says (a
  // workload whose `seconds` column counts from the run's start names it as the clock).
  // A resumed run (`resumed_at` >= 0: the last step, epoch or round its checkpoint holds)
  // appends to the CSV, dropping rows past that step (they run again), and its event file tells
  // TensorBoard to forget the earlier files' steps past it (run/run_outputs.h). OutputError
  // naming the file when any of it fails. Others: nothing.
  void open(const std::string& config_yaml, const std::string& csv_name, const std::string& header,
            long long resumed_at = -1, CsvScalars scalars = {});
  // The lead: one row of the CSV that open() opened. Others: nothing.
  template <typename... V>
  void row(const V&... values) {
    out_.row(values...);
  }

  // Whether the n-th step (epoch, round; from 1) prints a progress line: every run.log_interval-th, on the lead.
  bool log_due(long long n) const { return lead() && n % log_interval_ == 0; }

  // Call between steps on every rank; `steps_done` counts this rank's steps (lock step: the
  // same on every rank, as the agreement is a collective every kStopCheckSteps of them). True
  // from the first stop on.
  bool stop_requested(long long steps_done = 0);
  bool stopped() const { return stopped_; }

  // "<tool>: stopped by <who>[ <where>][; <then>]", who being "SIGINT", "SIGTERM on another
  // rank" or "a signal on another <peer>".
  void report_stop(const std::string& where, const std::string& then) const;
  // "<tool>: stopped by <who> after <unit> <done> of <planned>; the outputs hold the run so far".
  void report_stop(const char* unit, long long done, long long planned) const;

  // Seconds since the loop was made.
  double seconds() const;

  // The lead: closes the CSV and, given charts, draws out_dir/learning_curve.png from
  // out_dir/csv_name (default: the CSV open() opened); says where the TensorBoard file is. True
  // when the picture was drawn; never throws for a missing gnuplot (common/plot.h).
  bool finish(const std::vector<Chart>& charts = {}, const std::string& csv_name = "");

 private:
  std::string tool_;
  int log_interval_;
  run::RunOutputs out_;  // the lead's outputs and its claim on run.out_dir
  std::chrono::steady_clock::time_point start_;
  transport::ProcessGroup* pg_ = nullptr;
  std::string peer_;
  std::optional<StopFlag> flag_;
  bool stopped_ = false;
};

}  // namespace distrl::training
