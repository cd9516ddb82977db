// The parameter-server workloads' configuration (configs/ps_*.yaml). Roles: ranks
// 0..servers-1 are the server shards, the next `trainers` ranks the trainers.
#pragma once

#include <fstream>
#include <string>

#include "common/settings.h"
#include "training/ps/server.h"

namespace distrl::training::ps {

struct PsConfig {
  int servers = 1;                   // roles.servers
  int trainers = 2;                  // roles.trainers
  // run
  std::string out_dir = "runs/ps";
  int seed = 1;
  int log_interval = 1;              // rounds between progress lines
  int torch_threads = 1;
  // model (batch update: the tutorial's ResNet-50, or small ones for tests)
  std::string model = "resnet50";    // resnet50 | mlp (batch update); mnist_cnn | mlp (model on server)
  int classes = 30;
  int image_size = 64;
  int channels = 3;
  std::vector<int> hidden{64};       // mlp
  int embeddings = 100;              // hybrid: EmbeddingBag rows
  int embedding_dim = 16;            // hybrid: EmbeddingBag width (the DDP'd Linear's input)
  // data (model on server)
  std::string data_path = "/usr/share/datasets/fashion-mnist";
  int data_limit = 0;                // training images used (0: all)
  int test_limit = 0;                // test images used (0: all)
  // train
  int rounds = 10;                   // pushes per trainer (batch update)
  int epochs = 1;                    // model on server
  int test_batch_size = 1000;
  int retries = 100;
  int batches = 10;                  // hybrid: batches per trainer and epoch                 // versioned: stale refusals of one batch before giving up
  int batch_size = 20;               // per trainer and round
  double slow_ms = 0;                // a straggler: this trainer sleeps this long per round
  int slow_trainer = -1;             // which one (-1: none)
  // ps engine
  std::string consistency = "sync";  // sync | async | ssp
  int quorum = 0;                    // sync: pushes that close a round; 0 = every trainer present
  int max_wait_ms = 0;               // sync: a round closes this long after its first push; 0 = never
  std::string late = "drop";         // sync: drop | fold late pushes
  int staleness = 2;                 // ssp bound
  std::string step_policy = "serialize";  // model on server: serialize | hogwild | versioned
  // skip-gram (ps_skipgram)
  int vocab = 2000;                  // data.vocab: most frequent words kept
  int min_count = 3;                 // data.min_count
  int window = 5;                    // model.window: context words each side
  int negatives = 5;                 // train.negatives: noise words per pair
  int steps = 1500;                  // train.steps: pushes per trainer
  std::string words = "license,software,copyright,warranty,distribute,source";  // report.words
  int snapshot_rounds = 0;           // every N rounds (sync) / pushes (async, ssp); 0: not by rounds
  double snapshot_s = 0;             // every N seconds; 0: not by time
  double retry_s = 60;               // trainers wait this long for a shard that is down
  int max_restarts = 0;              // launch.max_restarts: distrl-launch restarts a dead rank
  // optimizer (applied on the servers)
  std::string optimizer = "sgd";
  double lr = 0.001;
  double momentum = 0.9;
  double weight_decay = 0.0;
  // dist
  double timeout_s = 120;
  std::string transport = "auto";

  // The server engine's options; snapshots (when on) go to snapshot_path(shard).
  ServerOptions server_options(int shard = 0) const;
  std::string snapshot_path(int shard) const;
  // optimizer.* as the spec servers and DistributedOptimizers step with (momentum: sgd only;
  // adagrad's eps LibTorch's 1e-10).
  autograd::OptimizerSpec optimizer_spec() const;
};

void bind(Settings& s, PsConfig& c);

// The lead trainer's outputs: creates run.out_dir, writes config.yaml there and opens
// metrics.csv with its header line (Error naming the directory when it cannot).
std::ofstream open_run_outputs(const PsConfig& c, const std::string& config_yaml, const std::string& csv_header);

}  // namespace distrl::training::ps
