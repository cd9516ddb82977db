// What distrl-agent prints and writes around a run: the banner, the observers line, the final
// report (summary.csv, config.yaml, learning_curve.png, the closing lines) and the --eval
// report. Called from the main thread; no state.
#pragma once

#include <string>
#include <vector>

#include "agent/rl_agent.h"
#include "rl/rl_config.h"
#include "run/run_outputs.h"

namespace distrl::agent {

// "distrl-agent: CartPole-v1, batched (...), reinforce, model tutorial, device cpu, lr ..., gamma ..."
void print_banner(const rl::RlConfig& cfg, const std::string& security);
// "distrl-agent: N observer(s) joined; running up to ..."
void print_joined(const rl::RlConfig& cfg, int observers);
// Writes OUT_DIR/config.yaml (config_yaml), OUT_DIR/summary.csv and, closing the run's outputs,
// learning_curve.png, and prints the "Solved/Stopped after ..." lines and what was written.
// OutputError naming a file that could not be written.
void write_run_report(const rl::RlConfig& cfg, const RunSummary& s, int observers, const std::string& config_yaml,
                      run::RunOutputs& out);
// The --eval line: mean +- std (min, max) of returns, the time taken and the env's threshold.
void print_evaluation(const rl::RlConfig& cfg, const std::vector<double>& returns, double seconds,
                      const std::string& render);

}  // namespace distrl::agent
