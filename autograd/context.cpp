#include "autograd/context.h"

#include <torch/csrc/autograd/variable.h>

#include "autograd/detail/engine.h"
#include "autograd/detail/optimizer_host.h"
#include "common/log.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::autograd {

using detail::Engine;

void enable(transport::RpcAgent& agent, AutogradOptions options) {
  auto engine = std::make_shared<Engine>(agent, options);
  agent.set_hooks(engine);
  std::weak_ptr<Engine> weak = engine;
  agent.register_function(detail::kGradsFn, [weak](std::int64_t ctx, std::int64_t msg,
                                                   std::vector<std::uint32_t> frames, std::vector<at::Tensor> grads) {
    auto e = weak.lock();
    if (!e) throw Error("distributed autograd: the engine is gone (shutting down)");
    return e->on_gradients(ctx, msg, frames, grads);
  });
  agent.register_function(detail::kReleaseFn, [weak](std::int64_t ctx) {
    auto e = weak.lock();
    return e ? e->release_from_peer(ctx) : transport::Future<void>::ready();
  });
  agent.register_function(detail::kLiveFn, [weak]() -> std::uint64_t {
    auto e = weak.lock();
    return e ? e->live() : 0;
  });
  agent.register_function(
      detail::kWaitsFn,
      [weak]() {
        auto e = weak.lock();
        return e ? e->guard_waits() : std::vector<std::int64_t>{};
      },
      transport::RunOn::IoThread);
  detail::register_optimizer_host(agent, engine);
}

Context::Context(transport::RpcAgent& agent) : engine_(detail::engine_of(agent)), state_(engine_->create()) {
  engine_->make_current(state_->id).swap(scope_);
}

Context::~Context() {
  scope_.reset();  // no longer current on this thread
  try {
    engine_->release(state_->id);  // acknowledged asynchronously
  } catch (const std::exception& e) {
    DISTRL_LOG(Warn, "dist_autograd: releasing " << engine_->describe(state_->id) << " failed: " << e.what());
  }
}

std::int64_t Context::id() const { return state_->id; }
transport::RpcAgent& Context::agent() const { return engine_->agent(); }

void backward(const Context& ctx, const std::vector<at::Tensor>& roots, bool retain_graph) {
  Engine& e = *ctx.engine_;
  auto& state = ctx.state_;
  const std::string where = e.describe(state->id);
  if (roots.empty()) throw Error("dist_autograd::backward of " + where + ": no roots given");
  torch::autograd::edge_list edges;
  torch::autograd::variable_list seeds;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const at::Tensor& r = roots[i];
    if (!r.defined() || !r.requires_grad())
      throw Error("dist_autograd::backward of " + where + ": root " + std::to_string(i) +
                  " does not require grad (is it computed from tensors that require grad?)");
    if (r.numel() != 1)
      throw Error("dist_autograd::backward of " + where + ": root " + std::to_string(i) + " has " +
                  std::to_string(r.numel()) + " elements; roots must be scalars (sum or average them first)");
    edges.push_back(torch::autograd::impl::gradient_edge(r));
    seeds.push_back(at::ones_like(r));
  }
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->graph_used)
      throw Error("dist_autograd::backward of " + where + " a second time: pass retain_graph=true to the first one");
    if (!retain_graph) state->graph_used = true;
  }
  const auto timeout = e.agent().options().rpc_timeout;
  transport::Future<void> done;
  try {
    done = e.run_part(state, edges, seeds);
  } catch (const std::exception& ex) {
    throw BackwardError("dist_autograd::backward of " + where + " failed: " + ex.what());
  }
  if (!done.wait_for(timeout))
    throw BackwardError("dist_autograd::backward of " + where + " did not finish within rpc_timeout (" +
                        std::to_string(timeout.count()) + " ms)");
  try {
    done.value();
  } catch (const BackwardError& ex) {
    throw BackwardError("dist_autograd::backward failed: " + std::string(ex.what()));
  } catch (const std::exception& ex) {
    throw BackwardError("dist_autograd::backward of " + where + " failed: " + ex.what());
  }
}

namespace {
std::vector<std::pair<at::Tensor, at::Tensor>> gradients_of(detail::ContextState& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  out.reserve(s.grads.size());
  for (auto& [impl, vg] : s.grads) out.push_back(vg);
  return out;
}
}  // namespace

std::vector<std::pair<at::Tensor, at::Tensor>> get_gradients(const Context& ctx) { return gradients_of(*ctx.state_); }

std::vector<std::pair<at::Tensor, at::Tensor>> get_gradients(transport::RpcAgent& agent, std::int64_t ctx) {
  auto s = detail::engine_of(agent)->find(ctx);
  return s ? gradients_of(*s) : std::vector<std::pair<at::Tensor, at::Tensor>>{};
}

std::size_t live_contexts(transport::RpcAgent& agent) { return detail::engine_of(agent)->live(); }

}  // namespace distrl::autograd
