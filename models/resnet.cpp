#include "models/resnet.h"

#include "common/error.h"

namespace distrl::models {

namespace nn = torch::nn;

namespace {

nn::Conv2d conv(int in, int out, int k, int stride, int pad) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(false));
}

}  // namespace

BottleneckImpl::BottleneckImpl(int inplanes, int planes, int stride) {
  conv1_ = register_module("conv1", conv(inplanes, planes, 1, 1, 0));
  bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
  conv2_ = register_module("conv2", conv(planes, planes, 3, stride, 1));
  bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
  conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1, 0));
  bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
  if (stride != 1 || inplanes != planes * kExpansion)
    downsample_ = register_module("downsample", nn::Sequential(conv(inplanes, planes * kExpansion, 1, stride, 0),
                                                               nn::BatchNorm2d(planes * kExpansion)));
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
  torch::Tensor out = torch::relu(bn1_(conv1_(x)));
  out = torch::relu(bn2_(conv2_(out)));
  out = bn3_(conv3_(out));
  return torch::relu(out + identity);
}

ResLayer ResNet50::make_layer(int& inplanes, int planes, int blocks, int stride) {
  ResLayer layer;
  layer->push_back(Bottleneck(inplanes, planes, stride));
  inplanes = planes * BottleneckImpl::kExpansion;
  for (int i = 1; i < blocks; ++i) layer->push_back(Bottleneck(inplanes, planes, 1));
  return layer;
}

ResNet50::ResNet50(int classes, Part part) {
  if (classes < 1) throw ModelError("resnet50: classes must be positive");
  body_ = register_module("body", nn::Sequential());
  int inplanes = 64;
  if (part != Part::Shard2) {
    body_->push_back("conv1", conv(3, 64, 7, 2, 3));
    body_->push_back("bn1", nn::BatchNorm2d(64));
    body_->push_back("relu", nn::ReLU(nn::ReLUOptions(true)));
    body_->push_back("maxpool", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)));
    body_->push_back("layer1", make_layer(inplanes, 64, 3, 1));
    body_->push_back("layer2", make_layer(inplanes, 128, 4, 2));
  } else {
    inplanes = 512;
  }
  if (part != Part::Shard1) {
    body_->push_back("layer3", make_layer(inplanes, 256, 6, 2));
    body_->push_back("layer4", make_layer(inplanes, 512, 3, 2));
    body_->push_back("avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
    body_->push_back("flatten", nn::Flatten());
    body_->push_back("fc", nn::Linear(512 * BottleneckImpl::kExpansion, classes));
  }
  // torchvision initialises convolutions with Kaiming-normal (fan_out) and batch norms to (1, 0).
  for (auto& m : modules(/*include_self=*/false))
    if (auto* c = m->as<nn::Conv2d>()) nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
}

torch::Tensor ResNet50::forward(torch::Tensor x) { return body_->forward(x); }

std::shared_ptr<ResNet50> make_resnet50(int classes) { return std::make_shared<ResNet50>(classes); }

ModelParallelResNet50::ModelParallelResNet50(int classes, torch::Device d0, torch::Device d1, int split_size)
    : d0_(d0), d1_(d1), split_size_(split_size),
      shard1_(register_module("shard1", std::make_shared<ResNet50>(classes, ResNet50::Part::Shard1))),
      shard2_(register_module("shard2", std::make_shared<ResNet50>(classes, ResNet50::Part::Shard2))) {
  shard1_->to(d0);
  shard2_->to(d1);
}

torch::Tensor ModelParallelResNet50::forward(torch::Tensor x) {
  x = x.to(d0_);
  if (split_size_ <= 0 || split_size_ >= x.size(0)) return shard2_->forward(shard1_->forward(x).to(d1_));
  // As the tutorial: start micro-batch i+1 on shard 1 before micro-batch i enters shard 2, so
  // on two GPUs the kernels of both queue up and run at the same time.
  const auto splits = x.split(split_size_);
  std::vector<torch::Tensor> out;
  out.reserve(splits.size());
  torch::Tensor prev = shard1_->forward(splits[0]).to(d1_);
  for (std::size_t i = 1; i < splits.size(); ++i) {
    torch::Tensor next = shard1_->forward(splits[i]).to(d1_);
    out.push_back(shard2_->forward(prev));
    prev = std::move(next);
  }
  out.push_back(shard2_->forward(prev));
  return torch::cat(out);
}

void ModelParallelResNet50::load_from(ResNet50& whole) {
  torch::NoGradGuard none;
  auto from_params = whole.named_parameters(), from_buffers = whole.named_buffers();
  for (auto* shard : {shard1_.get(), shard2_.get()}) {
    for (auto& p : shard->named_parameters()) {
      const auto* src = from_params.find(p.key());
      if (!src) throw ModelError("resnet50: the whole model has no parameter " + p.key());
      p.value().copy_(*src);
    }
    for (auto& b : shard->named_buffers()) {
      const auto* src = from_buffers.find(b.key());
      if (!src) throw ModelError("resnet50: the whole model has no buffer " + b.key());
      b.value().copy_(*src);
    }
  }
}

}  // namespace distrl::models
