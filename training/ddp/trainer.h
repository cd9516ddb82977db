// Config-driven supervised training with DDP (distrl-train): one process per rank, data split
// by DistributedSampler, progress per epoch, test accuracy, metrics CSV, checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "training/ddp/train_config.h"
#include "transport/collectives/process_group.h"

namespace distrl::training {

struct EpochResult {
  int epoch = 0;
  long long steps = 0;    // total so far
  double train_loss = 0;  // mean over ranks and batches of this epoch
  double test_loss = 0;
  double test_accuracy = -1;  // -1: regression (toy)
  double samples_per_s = 0;   // all ranks together
  double seconds = 0;
};

// Trains cfg on pg (every rank of pg calls it). resume: a checkpoint to continue from.
// Returns the per-epoch results (the same on every rank). Rank 0 prints progress and writes
// OUT_DIR/metrics.csv, OUT_DIR/config.yaml (config_yaml) and the checkpoint.
std::vector<EpochResult> train(const TrainConfig& cfg, const std::string& config_yaml,
                               std::shared_ptr<transport::ProcessGroup> pg, const std::string& resume = "");

}  // namespace distrl::training
