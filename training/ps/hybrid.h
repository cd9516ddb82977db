// The tutorial's hybrid form (HybridModel, "Combining DDP with the distributed RPC framework"):
// an EmbeddingBag(model.embeddings, model.embedding_dim, sum) lives on the "ps" worker (rank 0),
// a Linear(embedding_dim, classes) is replicated on the trainers (ranks 1..T) and DDP'd over a
// process group of the trainers only, and a "master" (rank T+1) creates the embedding remotely
// and starts the trainers by sending them its RRef. Each step, inside a distributed-autograd
// context: the embedding's forward by RPC, the Linear through DDP, cross-entropy, backward
// (distributed autograd carries the embedding's gradients to the ps; DDP averages the dense
// ones over the trainers inside this backward) and DistributedOptimizer::step of both. The
// trainers meet at a barrier after each step, so every trainer's update of the embedding is in
// before the next forward: a run equals one process (dense gradients averaged, the
// embedding's summed over trainers), which the tests check.
//
// Data as in the tutorial: each trainer's batches are bags of 20-50 random indices split at
// random offsets, with random targets; here the train.batches batches of a trainer are drawn
// once (from run.seed and the trainer) and repeated every epoch, so the loss can fall.
// Trainer 0 prints progress and writes OUT_DIR/metrics.csv, params.pt (embedding weight,
// Linear weight, Linear bias), learning_curve.png and config.yaml.
#pragma once

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "training/ps/ps_config.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {

struct HybridBatch {
  at::Tensor indices, offsets, targets;  // int64 [n], [bags], [bags]
};
// Trainer t's batch b (0 <= b < train.batches): a function of (run.seed, t, b) only.
HybridBatch hybrid_batch(const HybridConfig& cfg, int trainer, int batch);

struct HybridRank;  // what a rank keeps between setup and run

// In the agent's setup callback on every rank (enables distributed autograd, registers the
// embedding class on the ps and the start/done calls).
std::shared_ptr<HybridRank> setup_hybrid(transport::RpcAgent& agent, const HybridConfig& cfg);
// Then: serves (ps), trains (trainers) or drives (master) until the run is over.
void run_hybrid(const HybridConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                const std::shared_ptr<HybridRank>& rank);

}  // namespace distrl::training::ps
