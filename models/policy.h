// Policy networks: observations [B, obs_dim] -> action logits [B, n_actions]. softmax(logits)
// is the action distribution (the tutorial's network ends in softmax; we return logits and
// let the caller take log_softmax, which is the numerically stable form of the same thing).
//
//   auto net = distrl::models::make_policy("tutorial", {.obs_dim = 4, .n_actions = 2});
//   torch::Tensor logits = net->forward(obs);
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <string>
#include <vector>

namespace distrl::models {

struct PolicySpec {
  int obs_dim = 4;
  int n_actions = 2;
  std::vector<int> hidden{128};     // "mlp": hidden layer widths
  double dropout = 0.0;             // "mlp": dropout after each hidden layer
  std::string activation = "relu";  // "mlp": relu | tanh
};

class PolicyNet : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor obs) = 0;
};

// PyTorch's RL tutorial policy: Linear(obs,128) -> Dropout(0.6) -> ReLU -> Linear(128,actions).
class TutorialPolicy final : public PolicyNet {
 public:
  explicit TutorialPolicy(const PolicySpec& spec);
  torch::Tensor forward(torch::Tensor obs) override;

 private:
  torch::nn::Sequential net_{nullptr};
};

// Linear -> activation (-> Dropout) per hidden width, then a Linear head.
class MlpPolicy final : public PolicyNet {
 public:
  explicit MlpPolicy(const PolicySpec& spec);
  torch::Tensor forward(torch::Tensor obs) override;

 private:
  torch::nn::Sequential net_{nullptr};
};

// name: "tutorial" | "mlp". Throws ModelError naming the known models.
std::shared_ptr<PolicyNet> make_policy(const std::string& name, const PolicySpec& spec);
std::vector<std::string> policy_names();

}  // namespace distrl::models
