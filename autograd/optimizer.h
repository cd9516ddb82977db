// DistributedOptimizer, like torch.distributed.optim.DistributedOptimizer: one local optimizer
// per owner of the given parameter RRefs; step(ctx) steps every owner at once with the
// gradients context ctx accumulated there.
//
//   DistributedOptimizer opt(agent, OptimizerSpec{"sgd", 0.05}, params);  // RRef<at::Tensor>s
//   { dist_autograd::Context ctx(agent); ...; dist_autograd::backward(ctx, {loss}); opt.step(ctx); }
//
// Concurrency: each owner steps under one lock for all its local optimizers, so steps from
// several trainers (or several DistributedOptimizers) on the same parameters never interleave
// inside an update. Each DistributedOptimizer has its own optimizer state (momentum, Adam's
// moments) on each owner, as in torch: two trainers with two optimizers over the same
// parameters apply their own updates one after the other, each with its own context's
// gradients (Hogwild-style, not averaged). Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "autograd/context.h"
#include "transport/rpc/rref.h"

namespace distrl::autograd {

namespace detail {
class OptimizerHost;
}

struct OptimizerSpec {
  std::string kind = "sgd";  // sgd (momentum, nesterov), adam, adagrad
  double lr = 0.01;
  double momentum = 0.0;  // sgd
  bool nesterov = false;  // sgd
  double weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999;  // adam
  double eps = -1;                    // adam, adagrad; < 0: LibTorch's default for the kind (adam 1e-8, adagrad 1e-10)
  double lr_decay = 0.0;              // adagrad
  MSGPACK_DEFINE(kind, lr, momentum, nesterov, weight_decay, beta1, beta2, eps, lr_decay);

  double eps_or_default() const { return eps >= 0 ? eps : kind == "adagrad" ? 1e-10 : 1e-8; }
};

class DistributedOptimizer {
 public:
  // Creates one local optimizer on each owner of params (waits until all exist). Throws
  // ConfigError for an unknown kind or bad option, naming it, and Error when an owner fails.
  DistributedOptimizer(transport::RpcAgent& agent, OptimizerSpec spec, std::vector<transport::RRef<at::Tensor>> params);

  // Steps every owner concurrently with ctx's gradients; returns when all have stepped.
  // Parameters that got no gradient in ctx are left alone. Throws Error naming the owner
  // that failed (a dead worker, say), after the others finished.
  void step(const Context& ctx);
  void step(std::int64_t ctx);

  const OptimizerSpec& spec() const { return spec_; }

 private:
  transport::RpcAgent& agent_;
  OptimizerSpec spec_;
  std::vector<transport::RRef<detail::OptimizerHost>> owners_;
};

}  // namespace distrl::autograd
