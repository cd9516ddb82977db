#include "agent/round_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "common/event_file.h"

namespace distrl::agent {
namespace {

std::string thousands(double v) {
  std::string s = std::to_string(static_cast<long long>(v + 0.5));
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

}  // namespace

RoundLog::RoundLog(run::RunOutputs& out, int log_interval, const Progress& start, bool lag)
    : out_(out), log_interval_(log_interval), lag_(lag), last_print_(std::chrono::steady_clock::now()),
      steps_at_print_(start.env_steps) {
  CsvScalars scalars;
  scalars.tags = {{"mean_reward", "reward/mean"},       {"min_reward", "reward/min"}, {"max_reward", "reward/max"},
                  {"running_reward", "reward/running"}, {"lag_mean", "lag/mean"},     {"lag_max", "lag/max"}};
  scalars.clock = "seconds";  // since the run began, resumes included (the checkpoint holds both)
  scalars.rates = {"env_steps"};
  scalars.carries_over = true;
  out_.open_csv("metrics.csv",
                std::string("round,episodes,env_steps,seconds,mean_reward,min_reward,max_reward,running_reward,loss,"
                            "mean_batch") +
                    (lag ? ",lag_mean,lag_max,dropped" : ""),
                start.rounds > 0 ? start.rounds : -1, std::move(scalars));
}

void RoundLog::round(const Progress& p, const RoundData& d, const BatchStats* batch, bool force_print) {
  const std::vector<double>& returns = d.returns;
  const double loss = d.loss;
  double total = 0, lo = std::nan(""), hi = std::nan("");
  if (!returns.empty()) {
    lo = *std::min_element(returns.begin(), returns.end());
    hi = *std::max_element(returns.begin(), returns.end());
    for (double r : returns) total += r;
  }
  const double mean = returns.empty() ? std::nan("") : total / static_cast<double>(returns.size());
  const BatchStats bs = batch ? *batch : BatchStats{};
  // Each row flushed and checked: a full disk stops the run here, by name, not at the end. A NaN
  // cell (no episode ended) is no scalar.
  if (lag_)
    out_.row(p.rounds, p.episodes, p.env_steps, p.seconds, mean, lo, hi, p.running_reward, loss,
             batch ? bs.mean_rows() : 1.0, d.lag_mean, d.lag_max, d.dropped);
  else
    out_.row(p.rounds, p.episodes, p.env_steps, p.seconds, mean, lo, hi, p.running_reward, loss,
             batch ? bs.mean_rows() : 1.0);

  if (!force_print && p.rounds % log_interval_ != 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_print_).count();
  const double rows = bs.batches > batch_at_print_.batches
                          ? double(bs.rows - batch_at_print_.rows) / double(bs.batches - batch_at_print_.batches)
                          : 1.0;
  std::ostringstream line;
  line << "round " << std::setw(5) << p.rounds << "  episodes " << std::setw(6) << p.episodes << "  reward "
       << std::fixed << std::setprecision(1) << std::setw(6);
  if (std::isnan(mean)) line << "-";  // PPO: no episode ended in this round's fragments
  else line << mean;
  line << "  running " << std::setw(6) << p.running_reward << "  env-steps/s " << std::setw(9)
       << thousands((p.env_steps - steps_at_print_) / dt) << "  batch " << std::setprecision(2) << (batch ? rows : 1.0);
  if (lag_) line << "  lag " << std::setprecision(1) << d.lag_mean << "/" << d.lag_max << "  dropped " << d.dropped;
  line << "  " << std::setprecision(1) << p.seconds << " s";
  std::printf("%s\n", line.str().c_str());
  std::fflush(stdout);
  last_print_ = now;
  steps_at_print_ = p.env_steps;
  batch_at_print_ = bs;
}

}  // namespace distrl::agent
