// distrl-rnn: the distributed-autograd RNN workload, one process per rank (rank 0 the ps,
// ranks 1.. trainers). Usually started by: distrl-launch --config configs/rnn_dist_autograd.yaml
#include "common/command_line.h"
#include "common/main_guard.h"
#include "common/malloc_tuning.h"
#include "common/stop_signal.h"
#include "training/rnn/rnn.h"
#include "training/rpc_world.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/tensor.h"
#include "transport/security.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-rnn", [&] {
    using namespace distrl;
    CommandLine<training::RnnConfig> cmd(
        "distrl-rnn",
        "distrl-rnn: PyTorch's distributed-autograd RNN tutorial on real text. Rank 0 (ps) holds the\n"
        "embedding table and the decoder; each trainer runs an LSTM and trains all three through\n"
        "dist_autograd::backward and a DistributedOptimizer. Trainer 1 prints progress and writes\n"
        "OUT_DIR/metrics.csv, learning_curve.png, config.yaml and the checkpoint.\n"
        "SIGINT/SIGTERM: trainers stop after the current step, trainer 1 saves the checkpoint and\n"
        "writes its outputs; exit 130/143.\n"
        "Usually started by: distrl-launch --config configs/rnn_dist_autograd.yaml",
        "configs/rnn_dist_autograd.yaml", "continue from a checkpoint of an earlier run (OUT_DIR/checkpoint.pt)");
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    const training::RnnConfig& cfg = cmd.config;
    if (cmd.flags.check_only) return 0;
    keep_large_blocks_on_heap();
    transport::RpcAgent agent(training::rpc_options_for(cmd.flags.world, cfg.timeout_s, cfg.transport, cfg.torch_threads), [](transport::RpcAgent& a) { training::register_rnn(a); });
    if (agent.world_size() != cfg.trainers + 1)
      throw ConfigError("roles.trainers is " + std::to_string(cfg.trainers) + " but the world has " +
                        std::to_string(agent.world_size()) + " processes (1 ps + trainers)");
    // From here a first SIGINT/SIGTERM ends the run at a step boundary: trainers save and
    // report, the ps serves until they have shut down.
    install_stop_handlers();
    training::run_rnn(cfg, cmd.settings.to_yaml(), agent, cmd.flags.resume);
    agent.shutdown();
    return stop_exit_code();
  });
}
