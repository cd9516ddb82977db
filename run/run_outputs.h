// A run's outputs, written the same way by every tool (distrl-agent, distrl-train, distrl-ps,
// distrl-pipeline, the RNN trainers): the lead's claim on run.out_dir (common/run_lock.h),
// OUT_DIR/config.yaml, the metrics CSV (appended to on resume, rows past the checkpoint dropped,
// every row flushed and checked), the same rows as TensorBoard scalars (common/event_file.h:
// CsvEvents, with the run's own tags and rates), the learning curve (common/plot.h) and the line
// that says where the TensorBoard file is. What a run does between its rows (the step, the
// progress line, the stop rule) stays with its loop: training::RunLoop, agent::RoundLog.
//
//   run::RunOutputs out(cfg.out_dir, /*lead=*/rank == 0, cfg.tensorboard);   // claims the directory
//   out.write_config(settings.to_yaml());
//   out.open_csv("metrics.csv", "epoch,loss,seconds", resumed_at, {{}, "seconds", {}});
//   out.row(epoch, loss, seconds);  ...  out.close();  out.plot({charts});
//
// Only the lead writes: on any other rank every call is a no-op. Lifetime: one per run, on the
// thread that runs the loop; not thread-safe; no callbacks. Movable, not copyable.
#pragma once

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/event_file.h"
#include "common/output_file.h"
#include "common/plot.h"
#include "common/run_lock.h"

namespace distrl::run {

class RunOutputs {
 public:
  RunOutputs() = default;  // writes nothing (not the lead)
  // lead: claims out_dir for this run now, before anything is written (ConfigError while another
  // run writes there or, for a fresh run, when it holds another run's outputs; distrl-launch's
  // claim is inherited instead). tensorboard: open_csv also writes an event file.
  RunOutputs(std::string out_dir, bool lead, bool tensorboard);

  bool lead() const { return lead_; }
  const std::string& out_dir() const { return out_dir_; }
  // The event file open_csv made; "" without one.
  const std::string& event_file() const { return event_file_; }
  // The CSV open_csv opened; "" before.
  const std::string& csv_path() const { return csv_.path(); }

  // OUT_DIR/config.yaml, written atomically (OutputError naming it when it cannot be).
  void write_config(const std::string& yaml) const;
  // Opens OUT_DIR/csv_name with `header` (common/output_file.h: a resumed run, resumed_at >= 0
  // being the last step its checkpoint holds, appends and drops the rows past it) and, with
  // tensorboard, a new event file showing the same rows as `scalars` says; its first row's
  // rates are taken from the CSV's last kept row. OutputError naming the file when any fails.
  void open_csv(const std::string& csv_name, const std::string& header, long long resumed_at = -1,
                CsvScalars scalars = {});
  // One row of the CSV (and of the event file). OutputError when the write fails.
  template <typename... V>
  void row(const V&... values) {
    if (!lead_) return;
    csv_.row(values...);
    if (!events_) return;
    std::vector<std::string> cells;
    auto cell = [&cells](const auto& v) {
      std::ostringstream s;
      s.precision(17);  // every digit of a double (the CSV keeps 6): rates from a clock need them
      s << v;
      cells.push_back(s.str());
    };
    (cell(values), ...);
    events_->row(cells);
  }
  // Closes the CSV and the event file (plot() reads the CSV whole).
  void close();
  // Draws OUT_DIR/learning_curve.png from OUT_DIR/csv_name (default: the CSV open_csv opened).
  // True when it was drawn; never throws for a missing gnuplot (common/plot.h).
  bool plot(const std::vector<Chart>& charts, const std::string& csv_name = "") const;
  // "TensorBoard: FILE (tensorboard --logdir OUT_DIR)"; "" without an event file.
  std::string tensorboard_line() const;

 private:
  std::string out_dir_;
  bool lead_ = false;
  bool tensorboard_ = false;
  RunLock lock_;  // the lead's claim on out_dir
  CsvFile csv_;
  std::unique_ptr<CsvEvents> events_;
  std::string event_file_;
};

}  // namespace distrl::run
