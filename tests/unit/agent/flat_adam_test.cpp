// FlatAdam (agent/flat_adam.h) against torch::optim::Adam + clip_grad_norm_ on the same network
// and gradients: the same parameters after several steps (the clip's norm is one reduction
// instead of a norm of norms: a few float32 ulps), gradients accumulating into the flat buffer,
// and its state surviving a save, a load (which replaces the parameters' storage) and flatten().
#include "agent/flat_adam.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "models/actor_critic.h"
#include "models/checkpoint.h"

using namespace distrl;

namespace {

std::shared_ptr<models::ActorCritic> net(int seed) {
  torch::manual_seed(seed);
  models::ActorCriticSpec spec;
  spec.obs_dim = 8;
  spec.n_actions = 4;
  spec.hidden = {64, 64};
  return std::make_shared<models::ActorCritic>(spec);
}

torch::Tensor loss_of(models::ActorCritic& m, const torch::Tensor& x) {
  auto out = m.forward(x);
  return out.head.pow(2).mean() + (out.value - 1).pow(2).mean() * 3;
}

// One FlatAdam step of m on x.
void step(agent::FlatAdam& o, models::ActorCritic& m, const torch::Tensor& x) {
  o.zero_grad();
  loss_of(m, x).backward();
  o.step();
}

double max_gap(models::ActorCritic& a, models::ActorCritic& b) {
  double gap = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) gap = std::max(gap, (pa[i] - pb[i]).abs().max().item<double>());
  return gap;
}

}  // namespace

TEST(FlatAdamTest, StepsAsTorchAdamWithTheClipOnOneBuffer) {
  auto a = net(3), b = net(3);
  torch::optim::Adam reference(a->parameters(), torch::optim::AdamOptions(1e-3).eps(1e-5));
  agent::FlatAdam flat(*b, 1e-3, 1e-5);
  for (int step = 0; step < 8; ++step) {
    const auto x = torch::randn({64, 8});
    reference.zero_grad();
    loss_of(*a, x).backward();
    const double ref_norm = torch::nn::utils::clip_grad_norm_(a->parameters(), 0.5);
    reference.step();
    flat.zero_grad();
    loss_of(*b, x).backward();
    // backward accumulated into the flat gradient buffer: every parameter's grad is a view of it
    for (const auto& p : b->parameters()) EXPECT_EQ(p.grad().storage().data(), flat.grads().storage().data());
    EXPECT_NEAR(flat.clip_grad_norm(0.5), ref_norm, 1e-5 * ref_norm);
    flat.step();
    // Parameters near 0.1 move by up to lr = 1e-3 per step: a few ulps of their size apart.
    EXPECT_LE(max_gap(*a, *b), 1e-6) << "step " << step;
  }
  for (const auto& p : b->parameters()) EXPECT_EQ(p.storage().data(), flat.params().storage().data());
}

TEST(FlatAdamTest, ItsStateSurvivesALoadThatReplacesTheParameters) {
  auto a = net(5), b = net(5);
  agent::FlatAdam fa(*a, 1e-2), fb(*b, 1e-2);
  const auto x = torch::randn({32, 8});
  for (int i = 0; i < 3; ++i) step(fa, *a, x);
  // b takes a's parameters the way a checkpoint load does (new storage), then its state.
  {
    torch::NoGradGuard g;
    auto pa = a->parameters(), pb = b->parameters();
    for (std::size_t i = 0; i < pa.size(); ++i) pb[i].set_(pa[i].clone());
  }
  fb.flatten();
  fb.load(fa.state());
  step(fa, *a, x);
  step(fb, *b, x);
  EXPECT_EQ(max_gap(*a, *b), 0.0);
  EXPECT_THROW(
      agent::FlatAdam(*net(1), 1e-3)
          .load({{"adam.m", torch::zeros({3})}, {"adam.v", torch::zeros({3})}, {"adam.step", torch::ones({1})}}),
      std::invalid_argument);
}

// Through a real checkpoint: the parameters are views of one storage when saved; loading them
// into a flattened module replaces their storage, flatten() gathers them again, and the next
// step of both is the same.
TEST(FlatAdamTest, ACheckpointOfFlatParametersLoadsAndStepsOnAsBefore) {
  auto a = net(9), b = net(10);
  agent::FlatAdam fa(*a, 1e-2), fb(*b, 1e-2);
  const auto x = torch::randn({16, 8});
  for (int i = 0; i < 2; ++i) step(fa, *a, x);
  const std::string path = ::testing::TempDir() + "/flat_adam_test.pt";
  models::save_checkpoint(path, *a, nullptr, {}, fa.state());
  std::map<std::string, torch::Tensor> tensors;
  models::load_checkpoint(path, *b, nullptr, torch::kCPU, &tensors);
  fb.flatten();
  agent::load_optimizer(fb, tensors, path);
  EXPECT_EQ(max_gap(*a, *b), 0.0);
  for (const auto& p : b->parameters()) EXPECT_EQ(p.storage().data(), fb.params().storage().data());
  step(fa, *a, x);
  step(fb, *b, x);
  EXPECT_EQ(max_gap(*a, *b), 0.0);
  std::remove(path.c_str());
}
