#include "run/run_outputs.h"

namespace distrl::run {

RunOutputs::RunOutputs(std::string out_dir, bool lead, bool tensorboard)
    : out_dir_(std::move(out_dir)), lead_(lead), tensorboard_(tensorboard) {
  if (lead_) lock_ = RunLock(out_dir_);  // before any output; distrl-launch's claim is inherited
}

void RunOutputs::write_config(const std::string& yaml) const {
  if (lead_) write_file_atomically(out_dir_ + "/config.yaml", yaml);  // creates out_dir
}

void RunOutputs::open_csv(const std::string& csv_name, const std::string& header, long long resumed_at,
                          CsvScalars scalars) {
  if (!lead_) return;
  csv_ = CsvFile(out_dir_ + "/" + csv_name, header, resumed_at);  // RunLock made out_dir
  if (!tensorboard_) return;
  events_ = std::make_unique<CsvEvents>(out_dir_, header, resumed_at, std::move(scalars), csv_.last_kept_row());
  event_file_ = events_->path();
}

void RunOutputs::close() {
  csv_.close();
  events_.reset();
}

bool RunOutputs::plot(const std::vector<Chart>& charts, const std::string& csv_name) const {
  if (!lead_ || charts.empty()) return false;
  return plot_csv(csv_name.empty() ? csv_.path() : out_dir_ + "/" + csv_name, out_dir_ + "/learning_curve.png", charts);
}

std::string RunOutputs::tensorboard_line() const {
  if (event_file_.empty()) return "";
  return "TensorBoard: " + event_file_ + " (tensorboard --logdir " + out_dir_ + ")";
}

}  // namespace distrl::run
