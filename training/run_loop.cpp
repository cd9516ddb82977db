#include "training/run_loop.h"

#include <iostream>

#include "common/error.h"
#include "common/stop_signal.h"

namespace distrl::training {

RunLoop::RunLoop(const RunKeys& run, std::string tool, bool lead)
    : tool_(std::move(tool)), log_interval_(run.log_interval), out_(run.out_dir, lead, run.tensorboard),
      start_(std::chrono::steady_clock::now()) {
  install_stop_handlers();
}

void RunLoop::stop_in_lock_step(transport::ProcessGroup& pg, std::string peer) {
  pg_ = &pg;
  peer_ = std::move(peer);
}

void RunLoop::stop_through(transport::Store& store) { flag_.emplace(store); }

void RunLoop::open(const std::string& config_yaml, const std::string& csv_name, const std::string& header,
                   long long resumed_at, CsvScalars scalars) {
  out_.write_config(config_yaml);
  out_.open_csv(csv_name, header, resumed_at, std::move(scalars));
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
  if (!lead()) return false;
  out_.close();
  if (const std::string line = out_.tensorboard_line(); !line.empty()) std::cout << tool_ << ": " << line << std::endl;
  return out_.plot(charts, csv_name);
}

}  // namespace distrl::training
