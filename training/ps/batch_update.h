// The tutorial's BatchUpdateParameterServer form on the server engine: every trainer computes
// gradients on its own batch and pushes them (update_and_fetch_model); the servers average a
// round's pushes, step once (SGD with momentum by default) and answer every push of the round
// with the new weights, through async execution. Ranks 0..servers-1 serve, the rest train.
// Trainer 0 prints progress and writes OUT_DIR/metrics.csv, ps_stats.csv, params.pt and
// config.yaml.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/policy.h"
#include "training/ps/client.h"
#include "training/ps/ps_config.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {

// The model every trainer builds (the same weights from run.seed); cfg as the workload checks
// it (resnet50: model.channels 3).
std::shared_ptr<models::PolicyNet> build_model(const BatchUpdateConfig& cfg);

// Trainer t's batch of round r: random images and labels, a function of (seed, t, r) only.
struct Batch {
  torch::Tensor images, labels;
};
Batch synthetic_batch(const BatchUpdateConfig& cfg, int trainer, int round);

// In the agent's setup callback on every rank: a server rank registers its shard.
std::shared_ptr<ShardServer> setup_rank(transport::RpcAgent& agent, const ShardedConfig& cfg);
// Every shard's per-key and per-trainer statistics as one CSV (two tables).
void write_stats_csv(const std::string& path, const std::vector<ShardStats>& shards);
// A server rank's life after setup: watches the trainers, serves until every one is done (or
// gone), prints the shard's summary and stops it (a last snapshot when snapshots are on).
void serve_shard(const PsEngineConfig& cfg, transport::RpcAgent& agent, ShardServer& server);
// The start of every engine workload: sets LibTorch's threads, checks the world against the
// roles and, on a server rank, serves to the end (serve_shard) and returns true.
bool serve_if_server(const PsEngineConfig& cfg, transport::RpcAgent& agent, const std::shared_ptr<ShardServer>& server);
// A trainer's client: its id, the shards, ps.retry_s.
ClientOptions client_options(const ShardedConfig& cfg, int trainer);
// Then: serves until every trainer is done (servers) or trains (trainers).
void run_batch_update(const BatchUpdateConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                      const std::shared_ptr<ShardServer>& server);

}  // namespace distrl::training::ps
