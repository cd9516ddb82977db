#include "training/run_loop.h"

#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/stop_signal.h"

namespace distrl::training {

RunLoop::RunLoop(const RunKeys& run, std::string tool, bool lead)
    : tool_(std::move(tool)), out_dir_(run.out_dir), log_interval_(run.log_interval), lead_(lead),
      tensorboard_(run.tensorboard), start_(std::chrono::steady_clock::now()) {
  if (lead_) lock_ = RunLock(out_dir_);  // before any output; distrl-launch's claim is inherited
  install_stop_handlers();
}

void RunLoop::stop_in_lock_step(transport::ProcessGroup& pg, std::string peer) {
  pg_ = &pg;
  peer_ = std::move(peer);
}

void RunLoop::stop_through(transport::Store& store) { flag_.emplace(store); }

void RunLoop::open(const std::string& config_yaml, const std::string& csv_name, const std::string& header,
                   long long resumed_at) {
  if (!lead_) return;
  write_file_atomically(out_dir_ + "/config.yaml", config_yaml);  // creates out_dir
  csv_ = CsvFile(out_dir_ + "/" + csv_name, header, resumed_at);
  if (tensorboard_) {
    events_ = std::make_unique<CsvEvents>(out_dir_, header, resumed_at);
    event_file_ = events_->path();
  }
}

bool RunLoop::stop_requested(long long steps_done) {
  if (stopped_) return true;
  if (flag_) stopped_ = flag_->requested();
  else if (pg_) stopped_ = steps_done % kStopCheckSteps == 0 && stop_agreed(pg_);
  else stopped_ = stop_signal() != 0;
  return stopped_;
}

void RunLoop::report_stop(const std::string& where, const std::string& then) const {
  // A lock-step rank that got no signal itself stopped because another one did.
  const std::string who = flag_ ? flag_->by() : stop_signal() ? stop_signal_name() : "a signal on another " + peer_;
  std::cout << tool_ << ": stopped by " << who << (where.empty() ? "" : " " + where)
            << (then.empty() ? "" : "; " + then) << std::endl;
}

void RunLoop::report_stop(const char* unit, long long done, long long planned) const {
  report_stop("after " + std::string(unit) + " " + std::to_string(done) + " of " + std::to_string(planned),
              "the outputs hold the run so far");
}

double RunLoop::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool RunLoop::finish(const std::vector<Chart>& charts, const std::string& csv_name) {
  if (!lead_) return false;
  csv_.close();
  events_.reset();
  if (!event_file_.empty())
    std::cout << tool_ << ": TensorBoard: " << event_file_ << " (tensorboard --logdir " << out_dir_ << ")" << std::endl;
  if (charts.empty()) return false;
  const std::string csv = csv_name.empty() ? csv_.path() : out_dir_ + "/" + csv_name;
  return plot_csv(csv, out_dir_ + "/learning_curve.png", charts);
}

}  // namespace distrl::training
