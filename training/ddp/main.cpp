// distrl-train: config-driven supervised training with DDP, one process per rank. Usually
// started by: distrl-launch --config configs/ddp_fashion_mnist.yaml
#include "common/main_guard.h"
#include "training/workload.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-train", [&] {
    return distrl::training::WorkloadCommandLine(
               "distrl-train",
               "distrl-train: trains a model from a YAML configuration with DistributedDataParallel over a\n"
               "process group (one process per rank). Prints a progress bar per epoch, the test loss and\n"
               "accuracy, and writes OUT_DIR/metrics.csv, OUT_DIR/config.yaml and the checkpoint.\n"
               "SIGINT/SIGTERM: every rank stops after the same step, saves the checkpoint and exits 130/143.\n"
               "Usually started by: distrl-launch --config configs/ddp_fashion_mnist.yaml",
               "configs/ddp_fashion_mnist.yaml", "continue from a checkpoint of an earlier run (OUT_DIR/checkpoint.pt)")
        .main(argc, argv);
  });
}
