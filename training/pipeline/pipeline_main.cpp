// distrl-pipeline: pipeline-parallel training, one process per rank. Usually started by:
// distrl-launch --config configs/pipeline_fashion_mnist.yaml (or configs/pipeline_resnet50.yaml)
#include <malloc.h>

#include "common/command_line.h"
#include "common/main_guard.h"
#include "common/malloc_tuning.h"
#include "common/stop_signal.h"
#include "training/pipeline/workloads.h"
#include "transport/security.h"

int main(int argc, char** argv) {
  return distrl::guarded_main("distrl-pipeline", [&] {
    using namespace distrl;
    CommandLine<training::pipeline::PipelineConfig> cmd(
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
        "configs/pipeline_fashion_mnist.yaml", "fashion-mnist: continue from a checkpoints directory (OUT_DIR/checkpoints)");
    if (!cmd.parse(argc, argv)) return 0;
    distrl::transport::use_security(cmd.flags.security, cmd.flags.security_key);  // checks the key file
    training::pipeline::PipelineConfig cfg = cmd.config;
    try {
      training::pipeline::finish(cfg);
      // The schedule is built and verified here too, so --check-config refuses a bad one.
      if (cfg.workload == "pipeline_fashion_mnist") training::pipeline::schedule_for(cfg);
    } catch (const ArgumentError& e) {
      throw ConfigError(e.what());
    } catch (const training::pipeline::ScheduleError& e) {
      throw ConfigError(std::string("pipeline.schedule: ") + e.what());
    }
    if (cmd.flags.check_only) return 0;
    keep_large_blocks_on_heap();  // activations of many MB each micro-batch: no mmap + page faults each time
    // ... and one malloc arena: the shards run on RPC handler threads, whose own arenas (64 MiB
    // heaps, trimmed as soon as they free) faulted every activation in again. Measured, the
    // ResNet-50 pipeline at micro-batch 20: 12.7-14.1 s -> 6.7 s per batch; system time 1m36 -> 0m38.
    ::mallopt(M_ARENA_MAX, 1);
    if (cfg.workload == "pipeline_resnet50")
      training::pipeline::run_resnet_tutorial(cfg, cmd.settings.to_yaml(), cmd.flags.world);
    else if (cfg.workload == "pipeline_resnet50_model_parallel")
      training::pipeline::run_model_parallel(cfg, cmd.settings.to_yaml());
    else
      training::pipeline::run_fashion_mnist(cfg, cmd.settings.to_yaml(), cmd.flags.world, cmd.flags.resume);
    return stop_exit_code();  // 128 + the signal when one stopped the run, else 0
  });
}
