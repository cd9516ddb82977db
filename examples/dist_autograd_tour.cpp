// The distributed-autograd tour (docs/autograd.md): a parameter on worker1, a
// model half on each worker, backward across both, a DistributedOptimizer step, and the same
// numbers checked against one process. Run:
//   build/bin/distrl-launch --nproc 2 -- build/bin/dist_autograd_tour
#include <torch/torch.h>

#include <iostream>

#include "autograd/context.h"
#include "autograd/optimizer.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

using namespace distrl;
using namespace distrl::transport;

int main() {
  auto w = std::make_shared<at::Tensor>(torch::full({3}, 2.0).requires_grad_(true));  // worker1's parameter
  RpcAgent agent(RpcOptions{}, [&](RpcAgent& a) {
    dist_autograd::enable(a);  // on every worker, in setup
    a.register_function("scale", [w](at::Tensor x) { return x * *w; });
    a.register_function("param", [w, &a]() { return a.make_rref(w); });
    a.register_function("value", [w]() { return w->detach().clone(); });
  });
  int failures = 0;
  if (agent.rank() == 0) {
    at::Tensor x = torch::tensor({1.0, 2.0, 3.0}).requires_grad_(true);
    autograd::DistributedOptimizer opt(agent, autograd::OptimizerSpec{"sgd", 0.1},
                                       {agent.rpc_sync<RRef<at::Tensor>>("worker1", "param")});
    {
      dist_autograd::Context ctx(agent);                                 // RPCs below are recorded
      at::Tensor y = agent.rpc_sync<at::Tensor>("worker1", "scale", x);  // y = x * w, on worker1
      at::Tensor loss = (y * y).sum();                                   // here
      dist_autograd::backward(ctx, {loss});                              // runs on both workers
      for (auto& [t, g] : dist_autograd::get_gradients(ctx))             // d loss / d x = 2 x w^2
        std::cout << "driver: grad of x " << g << "\n";
      opt.step(ctx);  // w -= 0.1 * 2 x^2 w on worker1
    }                 // released on both workers
    at::Tensor now = agent.rpc_sync<at::Tensor>("worker1", "value");
    const bool ok = torch::allclose(now, torch::tensor({1.6, 0.4, -1.6}));
    std::cout << "driver: worker1's parameter after one step " << now << (ok ? "as expected" : "WRONG") << std::endl;
    failures += !ok;
  }
  agent.shutdown();
  std::cout << (agent.rank() == 0 ? "driver" : "worker1") << ": tour complete, shut down cleanly" << std::endl;
  return failures;
}
