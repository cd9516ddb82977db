// The parameter-server workloads in the registry (distrl-ps): the world their roles make, the
// checks --check-config makes, and each rank's start (its RPC agent, setup, run, shutdown).
#include <algorithm>

#include "common/run_dir.h"
#include "common/error.h"
#include "common/malloc_tuning.h"
#include "common/stop_signal.h"
#include "training/data.h"
#include "training/ps/batch_update.h"
#include "training/ps/hybrid.h"
#include "training/ps/model_on_server.h"
#include "training/ps/skipgram.h"
#include "training/rpc_world.h"
#include "training/workload.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {
namespace {

void check_engine(const PsEngineConfig& c) { check_options(c.server_options(), c.trainers); }
void check_skipgram(const SkipgramConfig& c) {
  check_engine(c);
  if (this_run().check_only) check_text_path(c.data_path);
}

void check_batch_update(const BatchUpdateConfig& c) {
  check_engine(c);
  if (c.model == "resnet50" && c.channels != 3) throw ConfigError("model.channels: resnet50 takes 3-channel images");
}

void check_model_on_server(const ModelOnServerConfig& c) {
  check_engine(c);  // the server tracks its trainers with a shard's bookkeeping
  if (c.servers != 1)
    throw ConfigError("roles.servers: the model-on-server form has one server, not " + std::to_string(c.servers));
  if (this_run().check_only) check_idx_dir(c.data_path);
}

void check_hybrid(const HybridConfig& c) {
  if (c.servers != 1) throw ConfigError("roles.servers: the hybrid form has one ps, not " + std::to_string(c.servers));
}

// A rank's RPC options: servers are named ps0, ps1, ...; LibTorch's threads as configured.
transport::RpcOptions ps_rpc_options(const PsCommon& cfg, const RunContext& ctx) {
  keep_large_blocks_on_heap();  // tensors of a few MB each step: no mmap + page faults each time
  transport::RpcOptions o = rpc_options_for(ctx.world, cfg.timeout_s, cfg.transport, cfg.torch_threads);
  o.name = o.rank >= 0 && o.rank < cfg.servers ? "ps" + std::to_string(o.rank) : "";
  return o;
}

// SIGINT/SIGTERM from the agent's start on: trainers stop after their current step and write
// their outputs; servers serve until every trainer has left; each exits 128 + the signal.
template <typename Setup, typename Run>
void run_rank(transport::RpcOptions o, Setup setup, Run run) {
  decltype(setup(std::declval<transport::RpcAgent&>())) state;
  transport::RpcAgent agent(o, [&](transport::RpcAgent& a) { state = setup(a); });
  install_stop_handlers();
  run(agent, state);
  agent.shutdown();
}

void batch_update_rank(const BatchUpdateConfig& cfg, const RunContext& ctx) {
  run_rank(
      ps_rpc_options(cfg, ctx), [&](transport::RpcAgent& a) { return setup_rank(a, cfg); },
      [&](transport::RpcAgent& a, const auto& server) { run_batch_update(cfg, ctx.config_yaml, a, server); });
}

void skipgram_rank(const SkipgramConfig& cfg, const RunContext& ctx) {
  run_rank(
      ps_rpc_options(cfg, ctx), [&](transport::RpcAgent& a) { return setup_rank(a, cfg); },
      [&](transport::RpcAgent& a, const auto& server) { run_skipgram(cfg, ctx.config_yaml, a, server); });
}

void model_on_server_rank(const ModelOnServerConfig& cfg, const RunContext& ctx) {
  transport::RpcOptions o = ps_rpc_options(cfg, ctx);
  // serialize parks a forward per waiting trainer on a handler thread: one each, plus room
  if (o.rank >= 0 && o.rank < cfg.servers) o.num_worker_threads = std::max(o.num_worker_threads, cfg.trainers + 2);
  run_rank(
      o, [&](transport::RpcAgent& a) { return setup_model_on_server(a, cfg); },
      [&](transport::RpcAgent& a, const auto& server) { run_model_on_server(cfg, ctx.config_yaml, a, server); });
}

void hybrid_rank(const HybridConfig& cfg, const RunContext& ctx) {
  transport::RpcOptions o = ps_rpc_options(cfg, ctx);
  if (o.rank == cfg.servers + cfg.trainers) o.name = "master";
  run_rank(
      o, [&](transport::RpcAgent& a) { return setup_hybrid(a, cfg); },
      [&](transport::RpcAgent& a, const auto& rank) { run_hybrid(cfg, ctx.config_yaml, a, rank); });
}

}  // namespace
}  // namespace distrl::training::ps

namespace distrl::training {

std::vector<Workload> ps_workloads() {
  using namespace ps;
  return {make_workload<BatchUpdateConfig>("ps_batch_update", check_batch_update, batch_update_rank),
          make_workload<ModelOnServerConfig>("ps_model_on_server", check_model_on_server, model_on_server_rank),
          make_workload<HybridConfig>("ps_hybrid", check_hybrid, hybrid_rank),
          make_workload<SkipgramConfig>("ps_skipgram", check_skipgram, skipgram_rank)};
}

}  // namespace distrl::training
