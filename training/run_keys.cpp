#include "training/run_keys.h"

namespace distrl::training {

void bind_run(Settings& s, RunKeys& c, const std::string& outputs, const std::string& progress) {
  s.bind("run.out_dir", &c.out_dir, "directory for " + outputs).output_dir();
  s.bind("run.seed", &c.seed, "seed of the model and of the data").range(0, 2147483647);
  s.bind("run.log_interval", &c.log_interval, progress + " between progress lines").range(1, 1000000000);
  s.bind("run.torch_threads", &c.torch_threads, "LibTorch intra-op threads per process").range(1, 256);
}

void bind_dist(Settings& s, DistKeys& c) {
  s.bind("dist.timeout_s", &c.timeout_s, "deadline of every call (RPC, collective, receive) and of rendezvous")
      .range(0.1, 86400);
  s.bind("dist.transport", &c.transport, "auto: ipc between processes on one host, else tcp")
      .choices({"auto", "tcp", "ipc"});
}

}  // namespace distrl::training
