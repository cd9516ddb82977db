// Actor-critic networks for PPO: a policy head (categorical logits for discrete actions, or a
// Gaussian mean with a learned, state-independent log-std for continuous ones) and a value
// head, as two separate MLPs (default) or one shared trunk. Orthogonal initialisation as in
// the PPO literature (gain sqrt(2) hidden, 0.01 policy head, 1 value head).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <vector>

namespace distrl::models {

struct ActorCriticSpec {
  int obs_dim = 4;
  int n_actions = 2;   // discrete: number of actions; 0 for continuous
  int action_dim = 0;  // continuous: action dimensions; 0 for discrete
  std::vector<int> hidden{64, 64};
  std::string activation = "tanh";  // tanh | relu
  bool shared = false;              // one trunk for policy and value
  double init_log_std = 0.0;
};

class ActorCritic : public torch::nn::Module {
 public:
  explicit ActorCritic(const ActorCriticSpec& spec);

  struct Out {
    torch::Tensor head;   // [B, n_actions] logits, or [B, action_dim] means
    torch::Tensor value;  // [B]
  };
  Out forward(const torch::Tensor& obs);

  bool continuous() const { return spec_.action_dim > 0; }
  const ActorCriticSpec& spec() const { return spec_; }
  torch::Tensor log_std() const { return log_std_; }

  // log pi(a|s) per row: actions int64 [B] (discrete) or float [B, A] (continuous).
  torch::Tensor log_prob(const Out& out, const torch::Tensor& actions) const;
  torch::Tensor entropy(const Out& out) const;  // per row

 private:
  ActorCriticSpec spec_;
  torch::nn::Sequential pi_{nullptr}, v_{nullptr}, trunk_{nullptr};
  torch::nn::Linear pi_head_{nullptr}, v_head_{nullptr};
  torch::Tensor log_std_;
};

}  // namespace distrl::models
