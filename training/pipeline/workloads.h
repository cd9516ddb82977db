// The pipeline workloads behind distrl-pipeline (configs/pipeline_*.yaml):
//
// - pipeline_fashion_mnist: the MNIST example's CNN (no dropout) on Fashion-MNIST, cut into
//   roles.stages stages (x pipeline.chunks pieces each) run by the stage runtime with
//   pipeline.schedule; the last stage prints progress and test accuracy per epoch and writes
//   metrics.csv + learning_curve.png; stage 0 writes timeline.json / timeline.png of one step
//   and prints the measured bubble per stage next to the verifier's and (p-1)/(m+p-1); every
//   stage checkpoints its pieces each epoch (checkpoints/stage<k>.pt; --resume DIR continues).
// - pipeline_resnet50: PyTorch's RPC pipeline tutorial: ResNet-50 in two shards owned by
//   worker1 and worker2 through remote references; the master (rank 0) splits each batch into
//   micro-batches of pipeline.microbatch_size rows and chains shard1.remote().forward(x) ->
//   shard2.rpc_async().forward(y) for all of them at once, then runs distributed autograd and a
//   DistributedOptimizer. A list of micro-batch sizes runs the tutorial's sweep (sweep.csv).
// - pipeline_resnet50_model_parallel: PyTorch's single-machine model-parallel tutorial in one
//   process: the same two shards on two devices (two GPUs, or the CPU twice), with and without
//   micro-batches, beside the whole model on one device (sweep.csv).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/command_line.h"
#include "common/settings.h"
#include "training/pipeline/schedule.h"
#include "training/run_keys.h"
#include <c10/core/Device.h>
#include <torch/nn/modules/container/sequential.h>

namespace distrl::training::pipeline {

struct PipelineConfig : RunKeys, DistKeys, DataKeys {
  PipelineConfig() {
    out_dir = "runs/pipeline";
    log_interval = 100;
  }
  std::string preset = "full";  // resnet: full (the tutorial's 120 @ 128x128) | small (24 @ 64x64)
  int stages = 2;               // roles.stages
  int classes = 10;             // model.classes (resnet: 1000)
  int image_size = 128;         // resnet: square side of the random images
  int epochs = 1;
  int batch_size = 64;
  int test_batch_size = 1000;
  int batches = 3;                // resnet: batches timed per micro-batch size
  int warmup = 1;                 // resnet: untimed batches before the sweep
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1 | a schedule file
  int microbatches = 4;
  int chunks = 1;
  bool recompute = false;
  std::string cuts;  // comma-separated child names; empty: balanced by measured time
  int max_activations = 0;
  int timeline_step = 20;                 // which step's timeline is written (of the first epoch)
  std::vector<int> microbatch_sizes{30};  // resnet
  std::string devices = "auto";           // model parallel: "cuda:0,cuda:1", "cpu,cpu" or auto
  bool check_one_process = false;         // resnet: the master also trains the model in-process and compares
  double lr = 0.05;
  double momentum = 0.0;
};

void bind(Settings& s, PipelineConfig& c);
// resnet: c with the preset applied (small: batch 24 of 64x64 images).
PipelineConfig with_preset(PipelineConfig c);

// pipeline.devices as the model-parallel tutorial's two devices (auto: two GPUs, one GPU twice,
// or the CPU twice). Throws ConfigError naming the key.
std::pair<torch::Device, torch::Device> model_parallel_devices(const std::string& spec);

// pipeline.schedule built (by name) or read (a path, or a file that exists), checked against
// roles.stages, pipeline.chunks and pipeline.microbatches and verified with max_activations.
// Throws ConfigError / ScheduleError naming the key.
Schedule schedule_for(const PipelineConfig& c);

// The stage runtime on Fashion-MNIST; every rank calls it. resume: a checkpoints directory or "".
void run_fashion_mnist(const PipelineConfig& c, const std::string& config_yaml, const WorldFlags& world,
                       const std::string& resume);
// The RPC tutorial; every rank calls it (rank 0 the master, 1 and 2 the shards' workers).
void run_resnet_tutorial(const PipelineConfig& c, const std::string& config_yaml, const WorldFlags& world);

// PyTorch's single-machine model-parallel tutorial, one process: the whole ResNet-50 on one
// device, then the two shards on pipeline.devices without and with micro-batches of each
// pipeline.microbatch_size rows (its PipelineParallelResNet50 split_size); sweep.csv.
void run_model_parallel(const PipelineConfig& c, const std::string& config_yaml);

// The MNIST example's CNN as a Sequential (dropout left out: pipeline recomputation needs a
// deterministic forward): conv1, relu1, conv2, relu2, pool, flatten, fc1, relu3, fc2.
torch::nn::Sequential make_fashion_cnn(int classes);

}  // namespace distrl::training::pipeline
