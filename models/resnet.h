// ResNet-50 as torchvision builds it (resnet50(): Bottleneck blocks [3, 4, 6, 3], stride on the
// 3x3 convolution, batch norm after every convolution, adaptive average pool, one Linear head),
// and the two shards PyTorch's RPC pipeline tutorial cuts it into. 1000 classes: 25,557,032
// parameters, as torchvision's.
//
//   auto net = distrl::models::make_resnet50(30);
//   torch::Tensor logits = net->forward(images);  // [B, 3, H, W] -> [B, 30]
#pragma once

#include <memory>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>

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

// PyTorch's single-machine model-parallel tutorial (ModelParallelResNet50 and, with
// split_size > 0, PipelineParallelResNet50): shard 1 (stem..layer2) on d0, shard 2 (layer3..fc)
// on d1, the activation copied between them. With split_size > 0 the batch goes through in
// micro-batches of split_size rows, shard 1 taking micro-batch i+1 before shard 2 takes i; on
// two GPUs (asynchronous kernels on each device) the two shards then overlap. On the CPU both
// devices are the CPU: the same code path, one shard after the other.
//
// Thread-safety: a torch module; one forward at a time.
class ModelParallelResNet50 final : public PolicyNet {
 public:
  ModelParallelResNet50(int classes, torch::Device d0, torch::Device d1, int split_size = 0);
  // [B, 3, H, W] on any device -> [B, classes] on d1.
  torch::Tensor forward(torch::Tensor x) override;
  void set_split_size(int rows) { split_size_ = rows; }
  // Copies the parameters and buffers of a whole ResNet50 (same classes) into the two shards.
  void load_from(ResNet50& whole);

 private:
  torch::Device d0_, d1_;
  int split_size_;
  std::shared_ptr<ResNet50> shard1_, shard2_;
};

}  // namespace distrl::models
