// distrl-pipeline: pipeline-parallel training, one process per rank. Usually started by:
// distrl-launch --config configs/pipeline_fashion_mnist.yaml (or configs/pipeline_resnet50.yaml)
#include "common/main_guard.h"
#include "training/workload.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-pipeline", [&] {
    return distrl::training::WorkloadCommandLine(
               "distrl-pipeline",
               "distrl-pipeline: pipeline-parallel training. pipeline_fashion_mnist cuts a CNN into\n"
               "roles.stages stages (one process each) that pass activations forward and gradients back\n"
               "directly, in the order of pipeline.schedule (gpipe, 1f1b, interleaved, zb-h1 or a file),\n"
               "checked for deadlocks and memory before anything is sent; the last stage prints progress\n"
               "and test accuracy, stage 0 writes timeline.json/png of one step with the measured bubble.\n"
               "pipeline_resnet50 is PyTorch's RPC pipeline tutorial: ResNet-50 in two shards held by\n"
               "worker1 and worker2 through remote references, the master chaining micro-batches through\n"
               "them with distributed autograd; a list of pipeline.microbatch_size values runs its sweep.\n"
               "pipeline_resnet50_model_parallel is the single-machine model-parallel tutorial: the two\n"
               "shards on two devices in one process, without and with micro-batches.\n"
               "Usually started by: distrl-launch --config configs/pipeline_fashion_mnist.yaml",
               "configs/pipeline_fashion_mnist.yaml",
               "fashion-mnist: continue from a checkpoints directory (OUT_DIR/checkpoints)")
        .main(argc, argv);
  });
}
