// distrl-ps: the parameter-server workloads, one process per rank (ranks 0..servers-1 the
// server shards, the rest trainers). Usually started by: distrl-launch --config configs/ps_batch_update.yaml
#include "common/command_line.h"
#include "common/main_guard.h"
#include "training/ps/batch_update.h"
#include "training/rpc_world.h"
#include "transport/rpc/rpc_agent.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-ps", [&] {
    using namespace distrl;
    CommandLine<training::ps::PsConfig> cmd(
        "distrl-ps",
        "distrl-ps: parameter-server training. Ranks 0..roles.servers-1 hold the parameters (named tensors\n"
        "sharded by name, tables by row) and step them with a server-side optimizer; the other ranks\n"
        "train and push gradients. ps_batch_update is the tutorial's BatchUpdateParameterServer: a\n"
        "round closes when the quorum has pushed (or at max_wait), averages, steps and answers\n"
        "every push with the new weights. Trainer 0 prints progress and writes OUT_DIR/metrics.csv,\n"
        "ps_stats.csv, params.pt and config.yaml.\n"
        "Usually started by: distrl-launch --config configs/ps_batch_update.yaml",
        "configs/ps_batch_update.yaml", "(not used by this workload)");
    if (!cmd.parse(argc, argv)) return 0;
    const training::ps::PsConfig& cfg = cmd.config;
    (void)cfg.server_options();  // refuses a bad combination before anything starts
    if (cmd.flags.check_only) return 0;
    transport::RpcOptions o = training::rpc_options_for(cmd.flags.world, cfg.timeout_s, cfg.transport);
    o.name = (o.rank >= 0 && o.rank < cfg.servers) ? "ps" + std::to_string(o.rank) : "";
    std::shared_ptr<training::ps::ShardServer> server;
    transport::RpcAgent agent(o, [&](transport::RpcAgent& a) { server = training::ps::setup_rank(a, cfg); });
    training::ps::run_batch_update(cfg, cmd.settings.to_yaml(), agent, server);
    agent.shutdown();
    return 0;
  });
}
