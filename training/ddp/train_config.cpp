#include "training/ddp/train_config.h"

#include "models/nets.h"

namespace distrl::training {

void bind(Settings& s, TrainConfig& c) {
  bind_run(s, c, "metrics.csv, config.yaml and the checkpoint");
  s.bind("model.name", &c.model, "network").choices(models::net_names());
  s.bind("model.hidden", &c.hidden, "mlp: hidden layer widths").range(1, 65536);
  s.bind("data.name", &c.dataset,
         "idx: IDX image files (MNIST layout) in data.path; toy: the DDP tutorial's "
         "random regression")
      .choices({"idx", "toy"});
  s.bind("data.path", &c.data_path, "idx: directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]");
  s.bind("data.toy_samples", &c.toy_samples, "toy: training samples (the test set is a quarter of it)")
      .range(8, 100000000);
  s.bind("data.limit", &c.limit, "use at most this many training samples; 0: all").range(0, 2000000000);
  s.bind("train.epochs", &c.epochs, "passes over the training set").range(1, 100000);
  s.bind("train.batch_size", &c.batch_size, "samples per step on each rank").range(1, 1000000);
  s.bind("train.test_batch_size", &c.test_batch_size, "samples per evaluation batch").range(1, 1000000);
  s.bind("train.max_steps", &c.max_steps, "stop after this many steps; 0: run every epoch").range(0, 2000000000);
  bind_optimizer(s, c, "optimizer", {"sgd", "adam"});
  s.bind("optimizer.weight_decay", &c.weight_decay, "L2 penalty").range(0, 10);
  s.bind("ddp.bucket_cap_mb", &c.bucket_cap_mb, "gradient bucket size in MiB").range(0.001, 100000);
  s.bind("ddp.find_unused_parameters", &c.find_unused_parameters,
         "allow parameters without a gradient in an iteration (walks the graph each forward)");
  s.bind("ddp.broadcast_buffers", &c.broadcast_buffers, "copy rank 0's buffers to all ranks before each forward");
  s.bind("dist.backend", &c.backend, "collective backend: zmq (CPU) or nccl (CUDA builds)").choices({"zmq", "nccl"});
  s.bind("dist.world_size", &c.world_size, "ranks (distrl-launch starts this many)").range(1, 4096);
  bind_dist(s, c);
  s.bind("dist.max_message_mb", &c.max_message_mb,
         "largest message a rank sends or accepts (a larger frame closes "
         "that connection unread)")
      .range(1, 65536);
  s.bind("dist.max_queued_mb", &c.max_queued_mb,
         "data that may wait unread in a rank's mailboxes; more is dropped "
         "and counted")
      .range(1, 1048576);
  bind_checkpoint(s, c, "epochs", 100000);
}

}  // namespace distrl::training
