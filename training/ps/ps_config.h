// The parameter-server workloads' configurations (configs/ps_*.yaml), one struct each over
// what they share. Roles: ranks 0..servers-1 are the server shards, the next `trainers` ranks
// the trainers (ps_hybrid: then the master).
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"
#include "training/ps/server.h"
#include "training/run_keys.h"

namespace distrl::training::ps {

// What every parameter-server workload has: run, dist, roles, the optimizer, restarts.
struct PsCommon : RunKeys, DistKeys, OptimizerKeys {  // the optimizer applied on the servers
  PsCommon() {
    out_dir = "runs/ps";
    log_interval = 1;
    lr = 0.001;
    momentum = 0.9;
  }
  int servers = 1;            // roles.servers
  int trainers = 2;           // roles.trainers
  int max_restarts = 0;       // launch.max_restarts: distrl-launch restarts a dead rank
  double weight_decay = 0.0;  // optimizer.weight_decay

  // optimizer.* as the spec servers and DistributedOptimizers step with (momentum: sgd only;
  // adagrad's eps LibTorch's 1e-10).
  autograd::OptimizerSpec optimizer_spec() const;
};

// The server engine's rules (ps.*): the workloads served by shards, and the model-on-server
// form, whose server keeps its trainers' books with a shard's.
struct PsEngineConfig : PsCommon {
  std::string consistency = "sync";  // sync | async | ssp
  int quorum = 0;                    // sync: pushes that close a round; 0 = every trainer present
  int max_wait_ms = 0;               // sync: a round closes this long after its first push; 0 = never
  std::string late = "drop";         // sync: drop | fold late pushes
  int staleness = 2;                 // ssp bound

  // The server engine's options (no snapshots).
  ServerOptions server_options() const;
};

// Workloads whose parameters live in shards: snapshots, a restarted shard, trainers' retries.
struct ShardedConfig : PsEngineConfig {
  int snapshot_rounds = 0;  // every N rounds (sync) / pushes (async, ssp); 0: not by rounds
  double snapshot_s = 0;    // every N seconds; 0: not by time
  double retry_s = 60;      // trainers wait this long for a shard that is down

  // Shard `shard`'s options; snapshots (when on) go to snapshot_path(shard).
  ServerOptions shard_options(int shard) const;
  std::string snapshot_path(int shard) const;
};

// ps_batch_update: the tutorial's BatchUpdateParameterServer on random images.
struct BatchUpdateConfig : ShardedConfig {
  std::string model = "resnet50";  // resnet50 | mlp
  int classes = 30;
  int image_size = 64;
  int channels = 3;
  std::vector<int> hidden{64};  // mlp
  int rounds = 10;              // train.rounds: pushes per trainer
  int batch_size = 20;          // per trainer and round
  double slow_ms = 0;           // a straggler: this trainer sleeps this long per round
  int slow_trainer = -1;        // which one (-1: none)
};

// ps_skipgram: word embeddings, both tables split by row over the shards.
struct SkipgramConfig : ShardedConfig {
  std::string data_path = "/usr/share/common-licenses";  // a text file or a directory of them
  int vocab = 2000;                                      // data.vocab: most frequent words kept
  int min_count = 3;                                     // data.min_count
  int embedding_dim = 16;                                // model.embedding_dim: the word vectors' width
  int window = 5;                                        // model.window: context words each side
  int negatives = 5;                                     // train.negatives: noise words per pair
  int steps = 1500;                                      // train.steps: pushes per trainer
  int batch_size = 20;                                   // train.batch_size: centre words per step
  std::string words = "license,software,copyright,warranty,distribute,source";  // report.words
};

// ps_model_on_server: the tutorial's ParameterServer + TrainerNet on Fashion-MNIST.
struct ModelOnServerConfig : PsEngineConfig, DataKeys {
  std::string model = "mnist_cnn";  // mnist_cnn | mlp
  int classes = 30;
  std::vector<int> hidden{64};  // mlp
  int epochs = 1;
  int batch_size = 20;
  int test_batch_size = 1000;
  int retries = 100;                      // versioned: stale refusals of one batch before giving up
  std::string step_policy = "serialize";  // serialize | hogwild | versioned
};

// ps_hybrid: the tutorial's HybridModel (an EmbeddingBag on the ps, a DDP'd Linear).
struct HybridConfig : PsCommon {
  int embeddings = 100;    // model.embeddings: EmbeddingBag rows
  int embedding_dim = 16;  // model.embedding_dim: its width (the DDP'd Linear's input)
  int classes = 30;        // model.classes: the Linear's outputs
  int epochs = 1;          // train.epochs: passes over the batches
  int batches = 10;        // train.batches: per trainer, repeated every epoch
};

void bind(Settings& s, BatchUpdateConfig& c);
void bind(Settings& s, SkipgramConfig& c);
void bind(Settings& s, ModelOnServerConfig& c);
void bind(Settings& s, HybridConfig& c);

}  // namespace distrl::training::ps
