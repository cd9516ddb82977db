#include "models/actor_critic.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>

#include <cmath>

#include "common/error.h"

namespace distrl::models {
namespace {

torch::nn::Sequential mlp(int in, const std::vector<int>& hidden, const std::string& activation) {
  torch::nn::Sequential s;
  for (int h : hidden) {
    torch::nn::Linear l(in, h);
    torch::NoGradGuard g;
    torch::nn::init::orthogonal_(l->weight, std::sqrt(2.0));
    torch::nn::init::zeros_(l->bias);
    s->push_back(l);
    if (activation == "relu") s->push_back(torch::nn::ReLU());
    else s->push_back(torch::nn::Tanh());
    in = h;
  }
  return s;
}

torch::nn::Linear head(int in, int out, double gain) {
  torch::nn::Linear l(in, out);
  torch::NoGradGuard g;
  torch::nn::init::orthogonal_(l->weight, gain);
  torch::nn::init::zeros_(l->bias);
  return l;
}

}  // namespace

ActorCritic::ActorCritic(const ActorCriticSpec& spec) : spec_(spec) {
  if (spec.obs_dim < 1) throw ModelError("actor-critic: obs_dim must be positive");
  if ((spec.n_actions > 0) == (spec.action_dim > 0))
    throw ModelError("actor-critic: give either n_actions (discrete) or action_dim (continuous)");
  if (spec.activation != "tanh" && spec.activation != "relu")
    throw ModelError("actor-critic: activation '" + spec.activation + "' (allowed: tanh, relu)");
  for (int h : spec.hidden)
    if (h < 1) throw ModelError("actor-critic: hidden widths must be positive");
  const int last = spec.hidden.empty() ? spec.obs_dim : spec.hidden.back();
  const int outs = continuous() ? spec.action_dim : spec.n_actions;
  if (spec.shared) {
    trunk_ = register_module("trunk", mlp(spec.obs_dim, spec.hidden, spec.activation));
  } else {
    pi_ = register_module("pi", mlp(spec.obs_dim, spec.hidden, spec.activation));
    v_ = register_module("v", mlp(spec.obs_dim, spec.hidden, spec.activation));
  }
  pi_head_ = register_module("pi_head", head(last, outs, 0.01));
  v_head_ = register_module("v_head", head(last, 1, 1.0));
  if (continuous()) log_std_ = register_parameter("log_std", torch::full({spec.action_dim}, spec.init_log_std));
}

ActorCritic::Out ActorCritic::forward(const torch::Tensor& obs) {
  if (spec_.shared) {
    auto h = spec_.hidden.empty() ? obs : trunk_->forward(obs);
    return {pi_head_(h), v_head_(h).squeeze(-1)};
  }
  auto hp = spec_.hidden.empty() ? obs : pi_->forward(obs);
  auto hv = spec_.hidden.empty() ? obs : v_->forward(obs);
  return {pi_head_(hp), v_head_(hv).squeeze(-1)};
}

torch::Tensor ActorCritic::log_prob(const Out& out, const torch::Tensor& actions) const {
  if (!continuous())
    return torch::log_softmax(out.head, -1).gather(1, actions.to(torch::kLong).unsqueeze(1)).squeeze(1);
  const auto std = log_std_.exp();
  const auto z = (actions - out.head) / std;
  return (-0.5 * z.pow(2) - log_std_ - 0.5 * std::log(2 * M_PI)).sum(-1);
}

torch::Tensor ActorCritic::entropy(const Out& out) const {
  if (!continuous()) {
    const auto logp = torch::log_softmax(out.head, -1);
    return -(logp.exp() * logp).sum(-1);
  }
  const auto per_dim = 0.5 + 0.5 * std::log(2 * M_PI) + log_std_;
  return per_dim.sum().expand({out.head.size(0)});
}

}  // namespace distrl::models
