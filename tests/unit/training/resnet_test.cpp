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

// The single-machine model-parallel tutorial's model: the same function as the whole network
// (both devices are the CPU here; two GPUs where present), with and without micro-batches; in
// training mode its gradients are those of the whole network applied micro-batch by
// micro-batch (batch norm normalises each micro-batch, as in the tutorial).
TEST(ResNet50Test, ModelParallelAndPipelinedEqualTheWholeNetwork) {
  const bool gpus = torch::cuda::device_count() >= 2;
  const torch::Device d0 = gpus ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const torch::Device d1 = gpus ? torch::Device(torch::kCUDA, 1) : torch::Device(torch::kCPU);
  torch::manual_seed(5);
  ResNet50 whole(10);
  ModelParallelResNet50 mp(10, d0, d1);
  mp.load_from(whole);
  const torch::Tensor x = torch::randn({6, 3, 64, 64}), y = torch::randn({6, 10});
  {
    torch::NoGradGuard no_grad;
    whole.eval();
    mp.eval();
    const torch::Tensor want = whole.forward(x);
    for (int split : {0, 4, 2}) {
      mp.set_split_size(split);
      EXPECT_LT((mp.forward(x).cpu() - want).abs().max().item<double>(), 1e-4) << "split " << split;
    }
  }
  whole.train();
  mp.train();
  mp.set_split_size(2);
  std::vector<torch::Tensor> outs;
  for (const auto& part : x.split(2)) outs.push_back(whole.forward(part));
  torch::mse_loss(torch::cat(outs), y).backward();
  torch::mse_loss(mp.forward(x), y.to(d1)).backward();
  auto want = whole.named_parameters();
  std::size_t checked = 0;
  for (const auto& p : mp.named_parameters()) {
    const std::string name = p.key().substr(p.key().find('.') + 1);  // shardN.body.x -> body.x
    ASSERT_NE(want.find(name), nullptr) << name;
    EXPECT_LT((p.value().grad().cpu() - want[name].grad()).abs().max().item<double>(), 1e-4) << name;
    ++checked;
  }
  EXPECT_EQ(checked, want.size());
}

}  // namespace
}  // namespace distrl::models
