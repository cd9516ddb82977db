// The owner side of DistributedOptimizer: a local torch optimizer over parameters owned here,
// stepped with one context's gradients. Private to autograd/.
#pragma once

#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "autograd/optimizer.h"

namespace distrl::autograd::detail {

class Engine;

class OptimizerHost {
 public:
  OptimizerHost(std::shared_ptr<Engine> engine, const OptimizerSpec& spec, std::vector<at::Tensor> params);
  // Sets each parameter's .grad to ctx's gradient for it (none: undefined), steps, restores
  // the .grad values it found; under the engine's optimizer lock. The parameters' guards
  // (step_guard.h) may refuse the step (StaleStepError) and are told when it happened. A
  // context gone here (released or reaped) is refused with BackwardError; one never seen here
  // steps nothing.
  void step(std::int64_t ctx);

 private:
  std::shared_ptr<Engine> engine_;
  std::vector<at::Tensor> params_;
  std::vector<std::shared_ptr<ParameterGuard>> guards_;  // found when created
  // What the torch optimizer steps: the parameters, or (guarded by hogwild or versioned)
  // aliases of their storage with their own autograd version counters.
  std::vector<at::Tensor> targets_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
};

// A torch optimizer from a spec (ConfigError for an unknown kind or a bad value).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<at::Tensor> params);
void register_optimizer_host(transport::RpcAgent& agent, const std::shared_ptr<Engine>& engine);

}  // namespace distrl::autograd::detail
