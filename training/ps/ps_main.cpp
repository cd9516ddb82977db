// distrl-ps: the parameter-server workloads, one process per rank (ranks 0..servers-1 the
// server shards, the rest trainers). Usually started by: distrl-launch --config configs/ps_batch_update.yaml
#include <algorithm>

#include "common/command_line.h"
#include "common/main_guard.h"
#include "common/malloc_tuning.h"
#include "common/stop_signal.h"
#include "training/ps/batch_update.h"
#include "training/ps/hybrid.h"
#include "training/ps/model_on_server.h"
#include "training/ps/skipgram.h"
#include "training/rpc_world.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/security.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-ps", [&] {
    using namespace distrl;
    CommandLine<training::ps::PsConfig> cmd(
        "distrl-ps",
        "distrl-ps: parameter-server training. Ranks 0..roles.servers-1 hold the parameters (named tensors\n"
        "sharded by name, tables by row) and step them with a server-side optimizer; the other ranks\n"
        "train and push gradients. ps_batch_update is the tutorial's BatchUpdateParameterServer: a\n"
        "round closes when the quorum has pushed (or at max_wait), averages, steps and answers\n"
        "every push with the new weights. ps_model_on_server is the tutorial's ParameterServer +\n"
        "TrainerNet: the CNN lives on ps0, trainers run its forward over RPC inside distributed-\n"
        "autograd contexts and step it with DistributedOptimizer (ps.step_policy: serialize,\n"
        "hogwild or versioned). ps_hybrid is the tutorial's HybridModel: an EmbeddingBag on ps0 used\n"
        "by RPC, a Linear DDP'd over the trainers, a master that starts them. ps_skipgram learns word\n"
        "embeddings (skip-gram, negative sampling) with both tables split by row over the servers and\n"
        "only touched rows pulled and pushed. Trainer 0 prints\n"
        "progress and writes its results under OUT_DIR.\n"
        "Usually started by: distrl-launch --config configs/ps_batch_update.yaml (or\n"
        "configs/ps_model_on_server.yaml, configs/ps_hybrid.yaml)",
        "configs/ps_batch_update.yaml", "(not used by this workload)");
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    const training::ps::PsConfig& cfg = cmd.config;
    (void)cfg.server_options();  // refuses a bad combination before anything starts
    if (cmd.flags.check_only) return 0;
    keep_large_blocks_on_heap();  // tensors of a few MB each step: no mmap + page faults each time
    transport::RpcOptions o = training::rpc_options_for(cmd.flags.world, cfg.timeout_s, cfg.transport, cfg.torch_threads);
    const bool serves = o.rank >= 0 && o.rank < cfg.servers;
    o.name = serves ? "ps" + std::to_string(o.rank) : "";
    if (cfg.workload == "ps_hybrid") {
      if (cfg.servers != 1) throw ConfigError("roles.servers: the hybrid form has one ps, not " + std::to_string(cfg.servers));
      if (o.rank == cfg.servers + cfg.trainers) o.name = "master";
      std::shared_ptr<training::ps::HybridRank> rank;
      transport::RpcAgent agent(o, [&](transport::RpcAgent& a) { rank = training::ps::setup_hybrid(a, cfg); });
      install_stop_handlers();
      training::ps::run_hybrid(cfg, cmd.settings.to_yaml(), agent, rank);
      agent.shutdown();
      return stop_exit_code();
    }
    if (cfg.workload == "ps_model_on_server") {
      if (cfg.servers != 1) throw ConfigError("roles.servers: the model-on-server form has one server, not " + std::to_string(cfg.servers));
      if (cfg.model == "resnet50") throw ConfigError("model.name: the model-on-server form trains mnist_cnn or mlp on 28x28 images");
      // serialize parks a forward per waiting trainer on a handler thread: one each, plus room
      if (serves) o.num_worker_threads = std::max(o.num_worker_threads, cfg.trainers + 2);
      std::shared_ptr<training::ps::ModelServer> server;
      transport::RpcAgent agent(o, [&](transport::RpcAgent& a) { server = training::ps::setup_model_on_server(a, cfg); });
      install_stop_handlers();
      training::ps::run_model_on_server(cfg, cmd.settings.to_yaml(), agent, server);
      agent.shutdown();
      return stop_exit_code();
    }
    std::shared_ptr<training::ps::ShardServer> server;
    transport::RpcAgent agent(o, [&](transport::RpcAgent& a) { server = training::ps::setup_rank(a, cfg); });
    // SIGINT/SIGTERM (from here on): trainers stop after their current step and write their
    // outputs; servers serve until every trainer has left; each exits 128 + the signal it got.
    install_stop_handlers();
    if (cfg.workload == "ps_skipgram") training::ps::run_skipgram(cfg, cmd.settings.to_yaml(), agent, server);
    else training::ps::run_batch_update(cfg, cmd.settings.to_yaml(), agent, server);
    agent.shutdown();
    return stop_exit_code();
  });
}
