#include "models/nets.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "common/error.h"

namespace distrl::models {
namespace {

namespace F = torch::nn::functional;

class ToyModel final : public Net {
 public:
  ToyModel(int inputs, int outputs)
      : net1_(register_module("net1", torch::nn::Linear(inputs, 10))),
        net2_(register_module("net2", torch::nn::Linear(10, outputs))) {}
  torch::Tensor forward(torch::Tensor x) override { return net2_(torch::relu(net1_(x))); }

 private:
  torch::nn::Linear net1_, net2_;
};

class MnistCnn final : public Net {
 public:
  explicit MnistCnn(int outputs)
      : conv1_(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2_(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        dropout1_(register_module("dropout1", torch::nn::Dropout(0.25))),
        dropout2_(register_module("dropout2", torch::nn::Dropout(0.5))),
        fc1_(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2_(register_module("fc2", torch::nn::Linear(128, outputs))) {}
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(conv1_(x));
    x = torch::relu(conv2_(x));
    x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
    x = dropout1_(x).flatten(1);
    x = dropout2_(torch::relu(fc1_(x)));
    return fc2_(x);
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  torch::nn::Dropout dropout1_, dropout2_;
  torch::nn::Linear fc1_, fc2_;
};

class MlpNet final : public Net {
 public:
  MlpNet(int inputs, int outputs, const std::vector<int>& hidden) {
    PolicySpec s;
    s.obs_dim = inputs;
    s.n_actions = outputs;
    s.hidden = hidden;
    mlp_ = register_module("mlp", std::make_shared<MlpPolicy>(s));
  }
  torch::Tensor forward(torch::Tensor x) override { return mlp_->forward(x.flatten(1)); }

 private:
  std::shared_ptr<MlpPolicy> mlp_;
};

}  // namespace

std::vector<std::string> net_names() { return {"toy", "mnist_cnn", "mlp"}; }

std::shared_ptr<Net> make_net(const NetSpec& s) {
  if (s.inputs < 1 || s.outputs < 1)
    throw ModelError("model '" + s.name + "': inputs and outputs must be positive (got " + std::to_string(s.inputs) +
                     ", " + std::to_string(s.outputs) + ")");
  if (s.name == "toy") return std::make_shared<ToyModel>(s.inputs, s.outputs);
  if (s.name == "mnist_cnn") {
    if (s.inputs != 784)
      throw ModelError("model 'mnist_cnn' takes 1x28x28 images (784 inputs), not " + std::to_string(s.inputs));
    return std::make_shared<MnistCnn>(s.outputs);
  }
  if (s.name == "mlp") {
    for (int h : s.hidden)
      if (h < 1) throw ModelError("model 'mlp': hidden widths must be positive");
    return std::make_shared<MlpNet>(s.inputs, s.outputs, s.hidden);
  }
  std::string known;
  for (auto& n : net_names()) known += (known.empty() ? "" : ", ") + n;
  throw ModelError("unknown model '" + s.name + "' (known: " + known + ")");
}

}  // namespace distrl::models
