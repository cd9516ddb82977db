// The PyTorch tutorials' supervised models, by name:
//   "toy"       — the DDP tutorial's ToyModel: Linear(10,10) -> ReLU -> Linear(10,5)
//   "mnist_cnn" — the MNIST example's Net: conv 1->32->64 (3x3), max-pool 2, dropout 0.25,
//                 fc 9216->128, dropout 0.5, fc 128->classes (returns logits)
//   "mlp"       — flatten, then Linear -> ReLU per hidden width, Linear -> classes
//
//   distrl::models::NetSpec spec;
//   spec.name = "mnist_cnn";
//   auto net = distrl::models::make_net(spec);
//   torch::Tensor logits = net->forward(images);  // [B, 1, 28, 28] -> [B, 10]
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/policy.h"

namespace distrl::models {

struct NetSpec {
  std::string name = "mlp";
  int inputs = 784;                           // toy: 10; mlp: flattened input size; mnist_cnn: 28x28 images only
  int outputs = 10;                           // toy: 5
  std::vector<int> hidden{1024, 1024, 1024};  // mlp
};

// Any of them: one tensor in, one tensor out.
using Net = PolicyNet;

// Throws ModelError naming the known models, or a bad size.
std::shared_ptr<Net> make_net(const NetSpec& spec);
std::vector<std::string> net_names();

}  // namespace distrl::models
