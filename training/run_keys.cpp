#include "training/run_keys.h"

#include "transport/rpc/options.h"

namespace distrl::training {

void bind_run(Settings& s, RunKeys& c, const std::string& outputs, const std::string& progress) {
  s.bind("run.out_dir", &c.out_dir, "directory for " + outputs).output_dir();
  s.bind("run.seed", &c.seed, "seed of the model and of the data").range(0, 2147483647);
  s.bind("run.log_interval", &c.log_interval, progress + " between progress lines").range(1, 1000000000);
  s.bind("run.torch_threads", &c.torch_threads, "LibTorch intra-op threads per process").range(1, 256);
  s.bind("run.tensorboard", &c.tensorboard,
         "write TensorBoard event files (events.out.tfevents.*) beside the CSV: the same scalars; "
         "tensorboard --logdir "
         "<run.out_dir>");
}

void bind_dist(Settings& s, DistKeys& c) {
  s.bind("dist.timeout_s", &c.timeout_s, "deadline of every call (RPC, collective, receive) and of rendezvous")
      .range(0.1, 86400);
  s.bind("dist.transport", &c.transport, transport::kTransportHelp).choices(transport::transport_choices());
}

void bind_optimizer(Settings& s, OptimizerKeys& c, const std::string& what, std::vector<std::string> names) {
  s.bind("optimizer.name", &c.optimizer, what).choices(std::move(names));
  s.bind("optimizer.lr", &c.lr, "learning rate").range(1e-12, 100);
  s.bind("optimizer.momentum", &c.momentum, "sgd: momentum").range(0, 1);
}

void bind_data(Settings& s, DataKeys& c, const std::string& path) {
  s.bind("data.path", &c.data_path, path);
  s.bind("data.limit", &c.data_limit, "training images used (0: all)").range(0, 1000000000);
  s.bind("data.test_limit", &c.test_limit, "test images used (0: all)").range(0, 1000000000);
}

void bind_checkpoint(Settings& s, CheckpointKeys& c, const std::string& unit, int max_every) {
  s.bind("checkpoint.path", &c.checkpoint, "checkpoint file; default OUT_DIR/checkpoint.pt");
  s.bind("checkpoint.every", &c.checkpoint_every, unit + " between checkpoints; 0: at the end only")
      .range(0, max_every);
}

std::string CheckpointKeys::checkpoint_path(const std::string& out_dir) const {
  return checkpoint.empty() ? out_dir + "/checkpoint.pt" : checkpoint;
}

}  // namespace distrl::training
