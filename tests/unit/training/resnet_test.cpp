// ResNet-50 has torchvision's layout: its parameter count, its output shape, and the tutorial's
// two shards that together are the whole network.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/resnet.h"

namespace distrl::models {
namespace {

std::int64_t count(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(ResNet50Test, ParameterCountsMatchTorchvision) {
  ResNet50 full(1000);
  EXPECT_EQ(count(full), 25557032);  // torchvision.models.resnet50()
  ResNet50 tutorial(30);
  EXPECT_EQ(count(tutorial), 25557032 - 2049 * 1000 + 2049 * 30);
  ResNet50 s1(30, ResNet50::Part::Shard1), s2(30, ResNet50::Part::Shard2);
  EXPECT_EQ(count(s1) + count(s2), count(tutorial));
}

TEST(ResNet50Test, ShardsChainToTheClassLogits) {
  torch::NoGradGuard no_grad;
  ResNet50 s1(30, ResNet50::Part::Shard1), s2(30, ResNet50::Part::Shard2);
  s1.eval();
  s2.eval();
  torch::Tensor mid = s1.forward(torch::randn({2, 3, 64, 64}));
  EXPECT_EQ(mid.sizes(), (std::vector<std::int64_t>{2, 512, 8, 8}));
  EXPECT_EQ(s2.forward(mid).sizes(), (std::vector<std::int64_t>{2, 30}));
}

}  // namespace
}  // namespace distrl::models
