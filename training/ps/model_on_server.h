// The tutorial's model-on-server form (ParameterServer + TrainerNet): the model lives on the
// server (rank 0, "ps0"); every trainer runs its forward through RPC inside its own
// distributed-autograd context, computes the loss on its own batch, runs backward (which
// reaches the server's parameters) and DistributedOptimizer::step. How the trainers' steps
// interleave is ps.step_policy (autograd/step_guard.h): serialize, hogwild or versioned (a
// refused stale step is retried with a fresh forward, at most train.retries times per batch).
//
// Data: Fashion-MNIST (or any MNIST-layout directory), split over the trainers by
// DistributedSampler. Trainer 0 evaluates the server's parameters on the test set after each
// of its epochs and writes OUT_DIR/metrics.csv (per log_interval steps), epochs.csv (test
// accuracy per epoch), learning_curve.png, params.pt and config.yaml; the server prints and
// writes OUT_DIR/server.csv (samples/s, guard statistics, retries) when every trainer is done.
#pragma once

#include <memory>
#include <string>

#include "training/ps/ps_config.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {

struct ModelServer;  // the server's state (model, guard, per-trainer reports)

// In the agent's setup callback on every rank: enables distributed autograd; on rank 0 builds
// the model and registers ps.model.* (returns it; nullptr on trainers).
std::shared_ptr<ModelServer> setup_model_on_server(transport::RpcAgent& agent, const ModelOnServerConfig& cfg);
// Then: serves until every trainer is done (server) or trains (trainers).
void run_model_on_server(const ModelOnServerConfig& cfg, const std::string& config_yaml, transport::RpcAgent& agent,
                         const std::shared_ptr<ModelServer>& server);

}  // namespace distrl::training::ps
