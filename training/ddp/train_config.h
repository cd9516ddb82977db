// The supervised training configuration (configs/ddp_toy.yaml, configs/ddp_fashion_mnist.yaml),
// bound to dotted keys: a YAML file plus command-line overrides, validated on load.
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"
#include "training/run_keys.h"

namespace distrl::training {

struct TrainConfig : RunKeys, DistKeys, OptimizerKeys, CheckpointKeys {
  TrainConfig() {
    out_dir = "runs/ddp";
    lr = 0.05;
    momentum = 0.9;
  }
  // model
  std::string model = "mlp";
  std::vector<int> hidden{256};
  // data
  std::string dataset = "idx";  // idx | toy
  std::string data_path = "/usr/share/datasets/fashion-mnist";
  int toy_samples = 4096;
  int limit = 0;  // use at most this many training samples (0: all)
  // train
  int epochs = 2;
  int batch_size = 64;  // per rank
  int test_batch_size = 1000;
  int max_steps = 0;          // stop after this many steps (0: run all epochs)
  double weight_decay = 0.0;  // optimizer.weight_decay
  // ddp
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  // dist
  std::string backend = "zmq";
  int world_size = 2;            // ranks distrl-launch starts
  double max_message_mb = 1024;  // ProcessGroupOptions::max_message_bytes
  double max_queued_mb = 2048;   // ProcessGroupOptions::max_queued_bytes
};

void bind(Settings& s, TrainConfig& c);

}  // namespace distrl::training
