// The sections every training workload's config has, bound once: run (outputs, seed, progress,
// LibTorch threads) and dist (deadline, transport); `security` is the command line's
// (common/command_line.h); and those several share: the optimizer's name, rate and momentum,
// an MNIST-layout image set, a checkpoint saved every N epochs or steps. A workload's config struct derives from them and sets its own defaults in its
// constructor; its bind calls bind_run, bind_dist (...) beside its own keys.
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"

namespace distrl::training {

struct RunKeys {
  std::string out_dir;      // run.out_dir
  int seed = 1;             // run.seed
  int log_interval = 20;    // run.log_interval: steps (rounds, epochs) between progress lines
  int torch_threads = 1;    // run.torch_threads: LibTorch intra-op threads per process
  bool tensorboard = true;  // run.tensorboard: TensorBoard event files beside the CSV
};

struct DistKeys {
  double timeout_s = 120;          // dist.timeout_s
  std::string transport = "auto";  // dist.transport: auto | shm | zmq | tcp | ipc
};

// optimizer.name, .lr and .momentum (distrl-train, the RNN, the parameter servers).
struct OptimizerKeys {
  std::string optimizer = "sgd";  // optimizer.name
  double lr = 0.01;               // optimizer.lr
  double momentum = 0.0;          // optimizer.momentum: sgd only
};

// data.path, data.limit, data.test_limit: an MNIST-layout image set (the Fashion-MNIST pipeline,
// the model-on-server parameter server).
struct DataKeys {
  std::string data_path = "/usr/share/datasets/fashion-mnist";  // data.path
  int data_limit = 0;                                           // data.limit: training images used (0: all)
  int test_limit = 0;                                           // data.test_limit: test images used (0: all)
};

// checkpoint.*, for workloads that save one file every N epochs or steps (distrl-train, the RNN).
struct CheckpointKeys {
  std::string checkpoint;    // checkpoint.path; "": OUT_DIR/checkpoint.pt
  int checkpoint_every = 1;  // checkpoint.every: epochs or steps between checkpoints; 0: at the end only

  std::string checkpoint_path(const std::string& out_dir) const;
  // Whether the n-th epoch or step saves: every checkpoint_every-th, and the last.
  bool checkpoint_due(long long n, bool last) const {
    return last || (checkpoint_every > 0 && n % checkpoint_every == 0);
  }
};

// run.*: `outputs` says what run.out_dir holds, `progress` what run.log_interval counts
// ("steps", "rounds", "epochs"), for --help.
void bind_run(Settings& s, RunKeys& c, const std::string& outputs, const std::string& progress = "steps");
// dist.timeout_s and dist.transport.
void bind_dist(Settings& s, DistKeys& c);
// optimizer.*: `what` words optimizer.name (--help), `names` the optimizers it takes.
void bind_optimizer(Settings& s, OptimizerKeys& c, const std::string& what, std::vector<std::string> names);
// data.*: `path` words data.path (--help).
void bind_data(Settings& s, DataKeys& c, const std::string& path);
// checkpoint.path and checkpoint.every (`unit`: "epochs" or "steps", at most `max_every`).
void bind_checkpoint(Settings& s, CheckpointKeys& c, const std::string& unit, int max_every);

}  // namespace distrl::training
