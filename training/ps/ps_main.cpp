// distrl-ps: the parameter-server workloads, one process per rank (ranks 0..servers-1 the
// server shards, the rest trainers). Usually started by: distrl-launch --config configs/ps_batch_update.yaml
#include "common/main_guard.h"
#include "training/workload.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-ps", [&] {
    return distrl::training::WorkloadCommandLine(
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
               "configs/ps_batch_update.yaml", "(not used by this workload)")
        .main(argc, argv);
  });
}
