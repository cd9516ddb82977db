#include "autograd/optimizer.h"

#include <map>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "autograd/detail/engine.h"
#include "autograd/detail/optimizer_host.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::autograd {
namespace detail {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerSpec& s, std::vector<at::Tensor> params) {
  if (!(s.lr > 0)) throw ConfigError("optimizer: lr must be > 0, got " + std::to_string(s.lr));
  if (s.momentum < 0 || s.weight_decay < 0 || s.lr_decay < 0)
    throw ConfigError("optimizer: momentum, weight_decay and lr_decay must be >= 0");
  if (s.kind == "sgd")
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(s.lr).momentum(s.momentum).nesterov(s.nesterov).weight_decay(s.weight_decay));
  if (s.kind == "adam")
    return std::make_unique<torch::optim::Adam>(
        params,
        torch::optim::AdamOptions(s.lr).betas({s.beta1, s.beta2}).eps(s.eps_or_default()).weight_decay(s.weight_decay));
  if (s.kind == "adagrad")
    return std::make_unique<torch::optim::Adagrad>(
        params,
        torch::optim::AdagradOptions(s.lr).lr_decay(s.lr_decay).weight_decay(s.weight_decay).eps(s.eps_or_default()));
  throw ConfigError("optimizer: unknown kind '" + s.kind + "' (known: sgd, adam, adagrad)");
}

OptimizerHost::OptimizerHost(std::shared_ptr<Engine> engine, const OptimizerSpec& spec, std::vector<at::Tensor> params)
    : engine_(std::move(engine)), params_(std::move(params)), guards_(engine_->guards_for(params_)) {
  bool alias = false;
  for (auto& g : guards_) alias = alias || g->policy() != StepPolicy::Serialize;
  for (auto& p : params_) targets_.push_back(alias ? at::Tensor(p.variable_data()) : p);
  opt_ = make_optimizer(spec, targets_);
}

void OptimizerHost::step(std::int64_t ctx) {
  std::lock_guard<std::mutex> lock(engine_->optimizer_mutex());
  for (auto& g : guards_) g->before_step(ctx);
  auto state = engine_->find(ctx);
  if (!state) engine_->refuse_if_gone(ctx, "an optimizer step");  // else never seen here: no gradients
  std::vector<at::Tensor> saved;
  saved.reserve(targets_.size());
  std::size_t with_grad = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& t = targets_[i];
    saved.push_back(t.grad());
    at::Tensor g;
    if (state) {
      std::lock_guard<std::mutex> l(state->mu);
      auto it = state->grads.find(params_[i].unsafeGetTensorImpl());
      if (it != state->grads.end()) g = it->second.second;
    }
    if (g.defined()) ++with_grad;
    t.mutable_grad() = g;
  }
  auto restore = [&] {
    for (std::size_t i = 0; i < targets_.size(); ++i) targets_[i].mutable_grad() = saved[i];
  };
  try {
    if (with_grad) opt_->step();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  for (auto& g : guards_) g->after_step(ctx, with_grad > 0);
}

void register_optimizer_host(transport::RpcAgent& agent, const std::shared_ptr<Engine>& engine) {
  std::weak_ptr<Engine> weak = engine;
  agent.register_class<OptimizerHost>(kOptimizerClass)
      .factory([weak](OptimizerSpec spec, std::vector<transport::RRef<at::Tensor>> params) {
        auto e = weak.lock();
        if (!e) throw Error("distributed autograd: the engine is gone (shutting down)");
        std::vector<at::Tensor> local;
        for (auto& r : params) local.push_back(*r.local_value());
        return std::make_shared<OptimizerHost>(e, spec, std::move(local));
      })
      .method("step", &OptimizerHost::step);
}

}  // namespace detail

DistributedOptimizer::DistributedOptimizer(transport::RpcAgent& agent, OptimizerSpec spec,
                                           std::vector<transport::RRef<at::Tensor>> params)
    : agent_(agent), spec_(std::move(spec)) {
  detail::make_optimizer(spec_, {});  // checks the spec here, before any owner sees it
  std::map<int, std::vector<transport::RRef<at::Tensor>>> by_owner;
  for (auto& p : params) by_owner[p.owner_rank()].push_back(p);
  auto none = detail::engine_of(agent)->make_current(-1);  // creating optimizers records nothing
  for (auto& [owner, ps] : by_owner)
    owners_.push_back(agent.remote<detail::OptimizerHost>(owner, detail::kOptimizerClass, spec_, ps));
  for (auto& o : owners_) {
    try {
      o.created().value();
    } catch (const std::exception& e) {
      throw Error("DistributedOptimizer: creating the local optimizer on " + o.owner_name() + " failed: " + e.what());
    }
  }
}

void DistributedOptimizer::step(const Context& ctx) { step(ctx.id()); }

void DistributedOptimizer::step(std::int64_t ctx) {
  // Remote owners first (they step concurrently), then this worker's own parameters here,
  // without a round trip to itself.
  std::vector<transport::Future<void>> steps(owners_.size());
  {
    auto none = detail::engine_of(agent_)->make_current(-1);
    for (std::size_t i = 0; i < owners_.size(); ++i)
      if (!owners_[i].is_owner()) steps[i] = owners_[i].rpc_async<void>("step", ctx);
  }
  std::string failed;
  bool all_stale = true;  // every failure a refused stale step: the caller may retry
  auto note = [&](std::size_t i, const std::exception& e, bool stale) {
    failed += (failed.empty() ? "" : "; ") + owners_[i].owner_name() + ": " + e.what();
    all_stale = all_stale && stale;
  };
  for (std::size_t i = 0; i < owners_.size(); ++i) {
    try {
      if (owners_[i].is_owner()) owners_[i].local_value()->step(ctx);
    } catch (const StaleStepError& e) {
      note(i, e, true);
    } catch (const std::exception& e) {
      note(i, e, false);
    }
  }
  for (std::size_t i = 0; i < owners_.size(); ++i) {
    if (owners_[i].is_owner()) continue;
    try {
      steps[i].value();
    } catch (const RemoteError& e) {
      note(i, e, e.type() == "distrl::autograd::StaleStepError");
    } catch (const std::exception& e) {
      note(i, e, false);
    }
  }
  if (failed.empty()) return;
  const std::string what = "DistributedOptimizer::step of context " + std::to_string(ctx) + " failed on " + failed;
  if (all_stale) throw StaleStepError(what);
  throw Error(what);
}

}  // namespace distrl::autograd
