// DistributedDataParallel, like torch.nn.parallel.DistributedDataParallel: every rank holds a
// replica of the module; gradients are averaged over the process group during backward.
//
//   auto pg = transport::init_process_group(transport::ProcessGroupOptions{});
//   models::NetSpec spec;
//   spec.name = "mnist_cnn";
//   auto net = models::make_net(spec);
//   training::DistributedDataParallel ddp(net, pg);        // parameters <- rank 0's
//   torch::optim::SGD opt(net->parameters(), 0.01);
//   auto loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
//   opt.zero_grad();
//   loss.backward();    // buckets are all-reduced while backward runs; grads are averaged on return
//   opt.step();
//
// Gradients are grouped into buckets of about bucket_cap_mb in reverse parameter order (the
// order backward produces them). A hook on each parameter's gradient accumulator copies its
// gradient into the bucket; when a bucket is full it is all-reduced asynchronously on the
// group's thread while backward goes on; buckets launch in the same order on every rank. At
// the end of backward (an autograd engine callback) every bucket is waited for and the averaged
// gradients are written back into .grad. Inside no_sync() nothing is communicated and
// gradients accumulate locally; the next synchronised backward averages the sum.
//
// Inside distributed autograd (dist_autograd::backward through a DDP'd module, the hybrid
// parameter-server form) the same buckets are filled from the context's gradients and the
// averages are written back into the context, not .grad, at the end of this worker's backward
// part; a DistributedOptimizer then steps them. One reduction per context: each rank's backward
// must reach the module in one part (its output sent over RPC at most once, one backward per
// context); a second part is refused with Error before any collective, so ranks stay in step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "models/nets.h"
#include "transport/collectives/process_group.h"

namespace distrl::training {

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  // The first bucket (the last layers, whose gradients come first) is kept small so that
  // communication starts early in backward, as torch does.
  double first_bucket_cap_mb = 1.0;
  // Parameters that get no gradient in an iteration count as zero instead of stalling the
  // reduction: found by walking the autograd graph from forward's output (costs a traversal).
  bool find_unused_parameters = false;
  // Copy rank 0's buffers (e.g. batch-norm statistics) to every rank before each forward.
  bool broadcast_buffers = true;
};

// Timing of the last synchronised backward, for benchmarks.
struct DdpStats {
  double backward_s = 0;  // first gradient hook -> end of backward (engine callback)
  double wait_s = 0;      // end of backward -> all buckets reduced
  double comm_s = 0;      // sum over buckets of all-reduce time
  int buckets = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<models::Net> module, std::shared_ptr<transport::ProcessGroup> pg,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The module's forward, with DDP's bookkeeping around it.
  torch::Tensor forward(const torch::Tensor& x);
  // For modules called directly: call before backward with the output(s) the loss comes from
  // (needed only with find_unused_parameters; forward() does it).
  void prepare_for_backward(const std::vector<torch::Tensor>& outputs);

  // While the guard lives, backward accumulates gradients locally without communicating.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d), was_(d.sync_) { d_.sync_ = false; }
    ~NoSync() { d_.sync_ = was_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& d_;
    bool was_;
  };
  NoSync no_sync() { return NoSync(*this); }

  models::Net& module() { return *module_; }
  const std::shared_ptr<models::Net>& module_ptr() const { return module_; }
  transport::ProcessGroup& process_group() { return *pg_; }
  // Bucket layout: parameter indices (registration order) per bucket, in launch order.
  std::vector<std::vector<int>> buckets() const;
  DdpStats last_stats() const;

 private:
  struct Reducer;
  std::shared_ptr<models::Net> module_;
  std::shared_ptr<transport::ProcessGroup> pg_;
  DdpOptions options_;
  bool sync_ = true;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace distrl::training
