#include "models/policy.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "common/error.h"

namespace distrl::models {
namespace {

void check_spec(const std::string& model, const PolicySpec& spec) {
  if (spec.obs_dim < 1 || spec.n_actions < 1)
    throw ModelError(model + ": obs_dim and n_actions must be positive (got " + std::to_string(spec.obs_dim) + ", " +
                     std::to_string(spec.n_actions) + ")");
  if (spec.dropout < 0 || spec.dropout >= 1)
    throw ModelError(model + ": dropout must be in [0, 1), got " + std::to_string(spec.dropout));
}

}  // namespace

TutorialPolicy::TutorialPolicy(const PolicySpec& spec) {
  check_spec("tutorial", spec);
  net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(spec.obs_dim, 128), torch::nn::Dropout(0.6),
                                                      torch::nn::ReLU(), torch::nn::Linear(128, spec.n_actions)));
}

torch::Tensor TutorialPolicy::forward(torch::Tensor obs) { return net_->forward(obs); }

MlpPolicy::MlpPolicy(const PolicySpec& spec) {
  check_spec("mlp", spec);
  if (spec.activation != "relu" && spec.activation != "tanh")
    throw ModelError("mlp: activation must be relu or tanh, got '" + spec.activation + "'");
  torch::nn::Sequential seq;
  int in = spec.obs_dim;
  for (int width : spec.hidden) {
    if (width < 1) throw ModelError("mlp: hidden widths must be positive, got " + std::to_string(width));
    seq->push_back(torch::nn::Linear(in, width));
    if (spec.activation == "relu") seq->push_back(torch::nn::ReLU());
    else seq->push_back(torch::nn::Tanh());
    if (spec.dropout > 0) seq->push_back(torch::nn::Dropout(spec.dropout));
    in = width;
  }
  seq->push_back(torch::nn::Linear(in, spec.n_actions));
  net_ = register_module("net", seq);
}

torch::Tensor MlpPolicy::forward(torch::Tensor obs) { return net_->forward(obs); }

std::vector<std::string> policy_names() { return {"mlp", "tutorial"}; }

std::shared_ptr<PolicyNet> make_policy(const std::string& name, const PolicySpec& spec) {
  if (name == "tutorial") return std::make_shared<TutorialPolicy>(spec);
  if (name == "mlp") return std::make_shared<MlpPolicy>(spec);
  throw ModelError("unknown model '" + name + "' (available: mlp, tutorial)");
}

}  // namespace distrl::models
