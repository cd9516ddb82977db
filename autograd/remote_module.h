// RemoteModule<M>, like torch.distributed.nn.RemoteModule: a torch::nn module constructed on
// another worker and used from here. forward runs on the owner; inside a dist_autograd
// Context it is recorded like any RPC, so backward reaches the owner's parameters, and
// remote_parameters() gives the RRefs a DistributedOptimizer steps.
//
//   // on every worker that may own one (in the RpcAgent setup callback):
//   register_remote_module<EmbeddingImpl, EmbeddingConfig>(agent, "Embedding",
//       [](const EmbeddingConfig& c) { return std::make_shared<EmbeddingImpl>(c.tokens, c.dim); });
//   // anywhere:
//   RemoteModule<EmbeddingImpl> emb(agent, "ps", "Embedding", EmbeddingConfig{100, 32});
//   at::Tensor y = emb.forward(tokens);
//
// M must have `at::Tensor forward(at::Tensor)`, or the signature given as the third template
// argument: register_remote_module<EmbeddingBagImpl, BagConfig, at::Tensor(at::Tensor, at::Tensor)>
// serves emb.forward(indices, offsets). Config must be msgpack-serializable. The
// module lives until every RemoteModule and RRef to it is gone. Thread-safe as RRef is; calls
// to one module run concurrently on the owner's handler pool unless M guards itself.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::autograd {

// What the owner keeps: the module, and one RRef per parameter (made once, so every caller
// gets the same ids).
template <typename M>
struct ModuleHost {
  std::shared_ptr<M> module;
  transport::RpcAgent* agent = nullptr;
  std::mutex mu;
  std::vector<transport::RRef<at::Tensor>> params;

  std::vector<transport::RRef<at::Tensor>> parameters() {
    std::lock_guard<std::mutex> lock(mu);
    if (params.empty())
      for (auto& p : module->parameters()) params.push_back(agent->make_rref(std::make_shared<at::Tensor>(p)));
    return params;
  }
};

// The forward method of a signature at::Tensor(Args...).
template <typename M, typename Signature>
struct ForwardOf;
template <typename M, typename... Args>
struct ForwardOf<M, at::Tensor(Args...)> {
  static auto method() {
    return [](ModuleHost<M>& h, Args... x) -> at::Tensor { return h.module->forward(x...); };
  }
};

template <typename M, typename Config, typename Signature = at::Tensor(at::Tensor)>
void register_remote_module(transport::RpcAgent& agent, const std::string& name,
                            std::function<std::shared_ptr<M>(const Config&)> make) {
  transport::RpcAgent* a = &agent;
  agent.register_class<ModuleHost<M>>(name)
      .factory([a, make](Config c) {
        auto h = std::make_shared<ModuleHost<M>>();
        h->module = make(c);
        h->agent = a;
        return h;
      })
      .method("forward", ForwardOf<M, Signature>::method())
      .method("parameters", [](ModuleHost<M>& h) { return h.parameters(); })
      .method("train", [](ModuleHost<M>& h, bool on) { h.module->train(on); })
      .method("is_training", [](ModuleHost<M>& h) { return h.module->is_training(); });
}

template <typename M>
class RemoteModule {
 public:
  // Constructs the module registered as `name` on `owner` (returns at once; calls queue behind
  // the construction, and a failed construction fails them).
  template <typename Config>
  RemoteModule(transport::RpcAgent& agent, const transport::Target& owner, const std::string& name,
               const Config& config)
      : rref_(agent.remote<ModuleHost<M>>(owner, name, config)) {}
  // The module another worker created, from its RRef (sent here in an RPC, say).
  explicit RemoteModule(transport::RRef<ModuleHost<M>> rref) : rref_(std::move(rref)) {}

  // x...: the tensors of the registered forward signature (one by default).
  template <typename... X>
  transport::Future<at::Tensor> forward_async(const X&... x) const {
    return rref_.template rpc_async<at::Tensor>("forward", x...);
  }
  template <typename... X>
  at::Tensor forward(const X&... x) const {
    return forward_async(x...).value();
  }
  // RRefs to the module's parameters, owned by the module's worker.
  std::vector<transport::RRef<at::Tensor>> remote_parameters() const {
    return rref_.template rpc_sync<std::vector<transport::RRef<at::Tensor>>>("parameters");
  }
  void train(bool on = true) const { rref_.template rpc_sync<void>("train", on); }
  void eval() const { train(false); }
  bool is_training() const { return rref_.template rpc_sync<bool>("is_training"); }
  const transport::RRef<ModuleHost<M>>& module_rref() const { return rref_; }

 private:
  transport::RRef<ModuleHost<M>> rref_;
};

}  // namespace distrl::autograd
