// The sections every training workload's config has, bound once: run (outputs, seed, progress,
// LibTorch threads) and dist (deadline, transport); `security` is the command line's
// (common/command_line.h). A workload's config struct derives from them and sets its own
// defaults in its constructor; its bind calls bind_run and bind_dist before its own keys.
#pragma once

#include <string>

#include "common/settings.h"

namespace distrl::training {

struct RunKeys {
  std::string out_dir;    // run.out_dir
  int seed = 1;           // run.seed
  int log_interval = 20;  // run.log_interval: steps (rounds, epochs) between progress lines
  int torch_threads = 1;  // run.torch_threads: LibTorch intra-op threads per process
};

struct DistKeys {
  double timeout_s = 120;          // dist.timeout_s
  std::string transport = "auto";  // dist.transport: auto | tcp | ipc
};

// run.*: `outputs` says what run.out_dir holds, `progress` what run.log_interval counts
// ("steps", "rounds", "epochs"), for --help.
void bind_run(Settings& s, RunKeys& c, const std::string& outputs, const std::string& progress = "steps");
// dist.timeout_s and dist.transport.
void bind_dist(Settings& s, DistKeys& c);

}  // namespace distrl::training
