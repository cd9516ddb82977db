// distrl-bench suites. Each runs real processes, prints a table and writes a CSV.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace distrl::tools {

// Shared by the suites (bench_util.cpp).
// A suite's CSV opened for writing, its directory made first (the defaults live under
// runs/bench/); ConfigError naming the path when it cannot be written.
std::ofstream open_csv(const std::string& path);
// A path for a worker's results in the temp directory, unique to this process.
std::string temp_file(const std::string& tag);
// distrl-launch --nproc N -- distrl-bench WORKER --out FILE ARGS: FILE's lines. Throws Error
// (after printing the workers' output) when a rank fails or nothing was written.
// security: "off" or "curve" (distrl-launch --security: the workers' sockets use CURVE).
// transport: the workers' DISTRL_TRANSPORT (what their "auto" means: shm, zmq, ...); empty:
// this process's own.
std::vector<std::string> run_workers(int ranks, const std::string& worker, const std::vector<std::string>& args,
                                     const std::string& security = "off", const std::string& transport = "");
// A worker's CSV line as exactly n fields (Error otherwise: the worker and the table disagree).
std::vector<std::string> fields(const std::string& line, std::size_t n, const std::string& worker);
// The q-quantile (0..1) of v, nearest rank; 0 for an empty v.
double percentile(std::vector<double> v, double q);
// Runs argv with its output in log; when it exits non-zero, prints the log to stderr and throws
// Error("<what> failed (its log is above)").
void run_or_show_log(const std::vector<std::string>& argv, const std::string& log, const std::string& what);
// A configuration file or directory a suite reads: `path` when it exists from the current
// directory; else, for a relative path (configs/...), the same path in the installation this
// binary runs from (PREFIX/share/distrl/configs/...) or the source tree it was built from, so
// the suites run from any directory. ConfigError naming the places and `flag` when none has it.
std::string find_config(const std::string& path, const std::string& flag);
// A CSV file's rows (header line first), up to the first blank line, as column -> cell; empty
// when the file is missing or has no rows.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path);

struct RpcBenchOptions {
  int calls = 20000;  // timed rpc_sync calls
  int warmup = 2000;
  int throughput_calls = 100000;  // rpc_async calls for the throughput run
  int inflight = 64;
  int big_mib = 4;
  int big_iters = 50;
  std::vector<std::string> transports{"ipc", "tcp", "shm"};
  std::string cpus = "any";                  // any | same | split: where the two processes run
  std::vector<std::string> security{"off"};  // off, curve: each setting measured (transport/bootstrap/security.h)
  int spin_us = -1;                          // -1: defaults; else both the I/O loop and future spin
  int idle_peers = 8;                        // then a world of 1 + idle_peers processes, connected and idle
  double idle_s = 10;                        // for this long: their CPU in all (0: skip)
  std::string csv;                           // --csv; "": OUT_DIR/rpc.csv (distrl-bench --out-dir)
};

int run_rpc_bench(const RpcBenchOptions& options);

struct RlBenchOptions {
  std::vector<int> observers{1, 2, 4, 8};
  int episodes = 200;  // rounds: every observer runs one episode per round
  int steps = 10;      // steps per episode (CartPole's random episodes outlast 10: fixed work)
  int envs_per_observer = 1;
  int repeats = 3;  // each cell runs batched and unbatched alternately this often: the median run
  std::string config = "configs/cartpole.yaml";
  // Policy sizes to sweep: "tutorial" (Linear 128, Dropout, ReLU, Linear) or "mlp:W1xW2..."
  // (hidden widths), e.g. mlp:256x256.
  std::vector<std::string> models{"tutorial"};
  std::vector<std::string> overrides;  // more KEY=VALUE for every run
  std::string csv;                     // --csv; "": OUT_DIR/rl.csv (distrl-bench --out-dir)
  std::string png;  // --png; "": beside the CSV (rl.csv -> rl.png; several models: rl-MODEL.png); "none": no plot
};

int run_rl_bench(const RlBenchOptions& options);

// The RL run left going (distrl-launch --config, one per mode, side by side), its processes'
// RSS, open fds and threads sampled from /proc; growth after the warm-up is reported.
struct SoakBenchOptions {
  double minutes = 60;
  double warmup_minutes = 5;
  double interval_s = 30;
  int observers = 8;
  std::vector<std::string> modes{"batched", "unbatched"};
  std::string config = "configs/cartpole.yaml";
  std::vector<std::string> overrides;  // more KEY=VALUE for every run
  std::string out_dir;                 // OUT_DIR/soak: soak.csv, soak.png and each run's outputs
};

int run_soak_bench(const SoakBenchOptions& options);

struct AllreduceBenchOptions {
  std::vector<int> ranks{2, 4};
  std::vector<std::int64_t> sizes{4 << 10, 1 << 20, 16 << 20, 64 << 20};  // bytes
  std::vector<std::string> security{"off"};                               // off, curve: each setting measured
  std::vector<std::string> transports{"shm", "zmq"};                      // each measured (ranks on one host)
  std::string csv;  // --csv; "": OUT_DIR/allreduce.csv (distrl-bench --out-dir)
};
int run_allreduce_bench(const AllreduceBenchOptions& options);
// One rank of the allreduce suite (under distrl-launch, on one host or several): checks each
// size's sums and averages first (exits 1 naming a wrong element), then times it; rank 0 writes
// a CSV line per size. flat: ProcessGroupOptions::hierarchical off.
int run_allreduce_worker(const std::string& out, const std::vector<std::int64_t>& sizes, bool flat = false);

struct DdpBenchOptions {
  std::vector<std::string> models{"mnist_cnn", "mlp"};
  std::vector<int> ranks{1, 2};
  int steps = 30;
  int batch = 64;  // per rank
  double bucket_mb = 25;
  std::vector<std::string> transports{"shm", "zmq"};  // each measured (ranks on one host)
  std::string csv;                                    // --csv; "": OUT_DIR/ddp.csv (distrl-bench --out-dir)
};
int run_ddp_bench(const DdpBenchOptions& options);
int run_ddp_worker(const std::string& out, const std::string& model, int steps, int batch, double bucket_mb);

struct EnvBenchOptions {
  std::vector<std::string> envs{"CartPole-v1",
                                "Acrobot-v1",
                                "MountainCar-v0",
                                "MountainCarContinuous-v0",
                                "Pendulum-v1",
                                "LunarLander-v2",
                                "LunarLanderContinuous-v2",
                                "BipedalWalker-v3",
                                "BipedalWalkerHardcore-v3"};
  std::vector<int> batches{1};  // envs stepped per call (a VecEnv), each measured
  long long steps = 1000000;    // env steps per row, or
  double seconds = 10;          // per row, whichever comes first (the Box2D envs are slow)
  std::string csv;              // --csv; "": OUT_DIR/env.csv (distrl-bench --out-dir)
};
int run_env_bench(const EnvBenchOptions& options);

// The actor-critic learners' own cost (in-process, no acting timed): per update and per
// gradient step, split into forward, backward, optimizer and the rest.
struct LearnerBenchOptions {
  std::vector<std::string> configs{"configs/lunarlander_ppo.yaml", "configs/lunarlander_appo.yaml"};
  int updates = 20;  // timed updates per config
  int warmup = 3;
  std::vector<std::string> overrides;  // KEY=VALUE for every config
  std::string csv;                     // --csv; "": OUT_DIR/learner.csv (distrl-bench --out-dir)
};
int run_learner_bench(const LearnerBenchOptions& options);

// One-line description of this machine for benchmark tables.
std::string machine_description();

struct AutogradBenchOptions {
  int iterations = 50;  // the tutorial's 10 epochs x 5 batches
  int contexts = 0;     // then a loop of this many contexts (0: skip)
  std::string csv;      // --csv; "": OUT_DIR/autograd.csv (distrl-bench --out-dir)
};
int run_autograd_bench(const AutogradBenchOptions& options);
int run_autograd_worker(const std::string& out, int iterations, int contexts);

struct PsBenchOptions {
  std::vector<std::string> parts{"sparse", "model", "straggler", "resnet", "restart"};  // which to run
  int rows = 10000;       // sparse: rows per pull and per push
  int iterations = 200;   // sparse: timed pull + push pairs
  int images = 3000;      // model on server: Fashion-MNIST images per run (0: skip)
  int rounds = 40;        // straggler runs: rounds per trainer
  int resnet_rounds = 4;  // ResNet-50 batch update rounds (0: skip)
  std::string configs = "configs";
  std::string out_dir;  // OUT_DIR/ps: ps.csv and every run's outputs
};
int run_ps_bench(const PsBenchOptions& options);
int run_ps_worker(const std::string& out, int rows, int iterations);

struct PipelineBenchOptions {
  std::vector<int> stages{2, 4, 8};
  int microbatches = 8;
  double f_ms = 20, b_ms = 40;                             // per stage and micro-batch (sleeps)
  std::vector<int> resnet_sizes{1, 2, 4, 8, 20, 40, 120};  // empty or {0}: skip the tutorial
  int resnet_batches = 3;
  std::string configs = "configs";
  std::string out_dir;  // OUT_DIR/pipeline
};
int run_pipeline_bench(const PipelineBenchOptions& options);
int run_pipeline_worker(const std::string& out, const std::string& schedule, int microbatches, int chunks, double f_ms,
                        double b_ms, int steps);

}  // namespace distrl::tools
