// distrl-train: config-driven supervised training with DDP, one process per rank. Usually
// started by: distrl-launch --config configs/ddp_fashion_mnist.yaml
#include <cstdio>

#include "common/command_line.h"
#include "common/main_guard.h"
#include "common/stop_signal.h"
#include "training/train_config.h"
#include "training/trainer.h"
#include "transport/collectives/process_group.h"
#include "transport/security.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-train", [&] {
    using namespace distrl;
    CommandLine<training::TrainConfig> cmd(
        "distrl-train",
        "distrl-train: trains a model from a YAML configuration with DistributedDataParallel over a\n"
        "process group (one process per rank). Prints a progress bar per epoch, the test loss and\n"
        "accuracy, and writes OUT_DIR/metrics.csv, OUT_DIR/config.yaml and the checkpoint.\n"
        "SIGINT/SIGTERM: every rank stops after the same step, saves the checkpoint and exits 130/143.\n"
        "Usually started by: distrl-launch --config configs/ddp_fashion_mnist.yaml",
        "configs/ddp_fashion_mnist.yaml", "continue from a checkpoint of an earlier run (OUT_DIR/checkpoint.pt)");
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    const training::TrainConfig& cfg = cmd.config;
    if (cmd.flags.check_only) return 0;
    transport::ProcessGroupOptions o;
    o.backend = cfg.backend;
    o.init_method = cmd.flags.world.resolved_init_method();
    o.rank = cmd.flags.world.rank;
    o.world_size = cmd.flags.world.world_size;
    o.timeout = std::chrono::milliseconds(static_cast<long long>(cfg.timeout_s * 1000));
    o.transport = cfg.transport;
    o.max_message_bytes = static_cast<std::size_t>(cfg.max_message_mb * (1 << 20));
    o.max_queued_bytes = static_cast<std::size_t>(cfg.max_queued_mb * (1 << 20));
    auto pg = transport::init_process_group(o);
    training::train(cfg, cmd.settings.to_yaml(), pg, cmd.flags.resume);
    return stop_exit_code();  // 0, or 128 + a SIGINT/SIGTERM that stopped the run after a checkpoint
  });
}
