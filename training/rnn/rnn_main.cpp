// distrl-rnn: the distributed-autograd RNN workload, one process per rank (rank 0 the ps,
// ranks 1.. trainers). Usually started by: distrl-launch --config configs/rnn_dist_autograd.yaml
#include "common/main_guard.h"
#include "training/workload.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-rnn", [&] {
    return distrl::training::WorkloadCommandLine(
               "distrl-rnn",
               "distrl-rnn: PyTorch's distributed-autograd RNN tutorial on real text. Rank 0 (ps) holds the\n"
               "embedding table and the decoder; each trainer runs an LSTM and trains all three through\n"
               "dist_autograd::backward and a DistributedOptimizer. Trainer 1 prints progress and writes\n"
               "OUT_DIR/metrics.csv, learning_curve.png, config.yaml and the checkpoint.\n"
               "SIGINT/SIGTERM: trainers stop after the current step, trainer 1 saves the checkpoint and\n"
               "writes its outputs; exit 130/143.\n"
               "Usually started by: distrl-launch --config configs/rnn_dist_autograd.yaml",
               "configs/rnn_dist_autograd.yaml", "continue from a checkpoint of an earlier run (OUT_DIR/checkpoint.pt)")
        .main(argc, argv);
  });
}
