// ResNet-50 as torchvision builds it (resnet50(): Bottleneck blocks [3, 4, 6, 3], stride on the
// 3x3 convolution, batch norm after every convolution, adaptive average pool, one Linear head),
// and the two shards PyTorch's RPC pipeline tutorial cuts it into. 1000 classes: 25,557,032
// parameters, as torchvision's.
//
//   auto net = distrl::models::make_resnet50(30);
//   torch::Tensor logits = net->forward(images);  // [B, 3, H, W] -> [B, 30]
#pragma once

#include <memory>

#include "models/policy.h"

namespace distrl::models {

// One Bottleneck: 1x1 reduce, 3x3 (stride), 1x1 expand (x4), with a projected shortcut when the
// shape changes.
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int inplanes, int planes, int stride);
  torch::Tensor forward(torch::Tensor x);
  static constexpr int kExpansion = 4;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

// A run of blocks (torchvision's layerN): a Sequential with a plain forward, so it nests.
class ResLayerImpl : public torch::nn::SequentialImpl {
 public:
  torch::Tensor forward(torch::Tensor x) { return torch::nn::SequentialImpl::forward(x); }
};
TORCH_MODULE(ResLayer);

// Stem (conv1, bn1, relu, maxpool) + layer1..layer4 + pool + fc, or a consecutive part of it:
// the tutorial's shard 1 is stem..layer2, shard 2 layer3..fc.
class ResNet50 final : public PolicyNet {
 public:
  enum class Part { Whole, Shard1, Shard2 };
  explicit ResNet50(int classes, Part part = Part::Whole);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  static ResLayer make_layer(int& inplanes, int planes, int blocks, int stride);
  torch::nn::Sequential body_{nullptr};
};

std::shared_ptr<ResNet50> make_resnet50(int classes);

}  // namespace distrl::models
