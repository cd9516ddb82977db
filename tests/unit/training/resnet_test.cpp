// ResNet-50 has torchvision's layout: its parameter count, its output shape, and the tutorial's
// two shards that together are the whole network.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "models/resnet.h"
#include "tests/support/tolerance.h"

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
    // The whole network on the whole batch, on halves and on thirds: the same function in
    // three summation orders (tests/support/tolerance.h); the shards are one more.
    torch::NoGradGuard no_grad;
    whole.eval();
    mp.eval();
    distrl::testing::Reorderings want("eval outputs");
    want.add({whole.forward(x)});
    want.add({torch::cat({whole.forward(x.narrow(0, 0, 3)), whole.forward(x.narrow(0, 3, 3))})});
    want.add({torch::cat(
        {whole.forward(x.narrow(0, 0, 2)), whole.forward(x.narrow(0, 2, 2)), whole.forward(x.narrow(0, 4, 2))})});
    for (int split : {0, 4, 2}) {
      mp.set_split_size(split);
      EXPECT_EQ(want.check({mp.forward(x).cpu()}), "") << "split " << split;
    }
  }
  whole.train();
  mp.train();
  mp.set_split_size(2);
  // Training: the whole network micro-batch by micro-batch (batch norm normalises each), its
  // gradients accumulated in three orders: one loss over the joined outputs, or each
  // micro-batch's loss (weighted 2/6) first to last or last to first.
  std::vector<std::string> names;
  for (const auto& p : whole.named_parameters()) names.push_back(p.key());
  distrl::testing::Reorderings grads("gradients");
  for (int order = 0; order < distrl::testing::kOrders; ++order) {
    whole.zero_grad();
    if (order == 0) {
      std::vector<torch::Tensor> outs;
      for (const auto& part : x.split(2)) outs.push_back(whole.forward(part));
      torch::mse_loss(torch::cat(outs), y).backward();
    } else {
      distrl::testing::backward_in_order(
          order, x, y, {2, 2, 2}, [&](const torch::Tensor& in) { return whole.forward(in); },
          [](const torch::Tensor& out, const torch::Tensor& t) { return torch::mse_loss(out, t); });
    }
    std::vector<torch::Tensor> g;
    auto named = whole.named_parameters();
    for (const auto& n : names) g.push_back(named[n].grad().clone());
    grads.add(g);
  }
  torch::mse_loss(mp.forward(x), y.to(d1)).backward();
  std::map<std::string, torch::Tensor> got;
  for (const auto& p : mp.named_parameters())
    got[p.key().substr(p.key().find('.') + 1)] = p.value().grad().cpu();  // shardN.body.x -> body.x
  EXPECT_EQ(got.size(), names.size()) << "the shards hold every parameter of the whole network, once";
  std::vector<torch::Tensor> in_order;
  for (const auto& n : names) {
    ASSERT_EQ(got.count(n), 1u) << n;
    in_order.push_back(got[n]);
  }
  EXPECT_EQ(grads.check(in_order), "");
}

}  // namespace
}  // namespace distrl::models
