// Adam over one contiguous buffer. A small network's update is dominated by LibTorch's cost per
// operation, not by arithmetic: torch::optim::Adam runs about eight operations per parameter
// tensor, clip_grad_norm_ two more, zero_grad one (12 tensors in a 64x64 actor-critic: ~130
// operations per minibatch). FlatAdam makes the module's parameters views into one buffer and
// their gradients views into another (backward accumulates into them in place), so zeroing,
// clipping and the Adam step are a handful of whole-buffer operations. The arithmetic is
// torch::optim::Adam's (the same element-wise operations, without weight decay or amsgrad); the
// clip's norm is one reduction instead of a norm of norms, so it may differ in the last bits.
//
// The parameters' version counters are no longer the buffer's: autograd cannot see an in-place
// change of the flat buffer between a forward and its backward (step() only between them).
//
// Lifetime: made after the module is on its device; loading a module's state replaces its
// parameters' storage (torch::nn::Module::load), so call flatten() again afterwards. Thread-
// safety: none; the learner's thread owns it. The module's parameters must not be replaced
// (to(), set_data) behind its back.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include "agent/learner.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace distrl::agent {

class FlatAdam {
 public:
  FlatAdam(torch::nn::Module& module, double lr, double eps = 1e-8, double beta1 = 0.9, double beta2 = 0.999);
  // (Re)makes every parameter a view into the flat buffer, keeping its values, and every
  // gradient a view into the flat gradient buffer (zeroed). The Adam state is kept.
  void flatten();
  void zero_grad() { grad_.zero_(); }
  // Scales the gradients so that their global 2-norm is at most max_norm; returns the norm before.
  double clip_grad_norm(double max_norm);
  void step();
  // For checkpoints: "adam.m", "adam.v", "adam.step". load() with none of them keeps a fresh
  // state (a checkpoint from before FlatAdam); with a wrong size throws std::invalid_argument.
  std::map<std::string, torch::Tensor> state() const;
  void load(const std::map<std::string, torch::Tensor>& tensors);
  const torch::Tensor& params() const { return flat_; }
  const torch::Tensor& grads() const { return grad_; }

 private:
  std::vector<torch::Tensor> params_;
  torch::Tensor flat_, grad_, m_, v_;
  double lr_, eps_, beta1_, beta2_;
  long long step_ = 0;
};

// One gradient step on `loss`: zero the gradients, backward, clip them to max_grad_norm, Adam;
// the phases are added to *times (its forward from `forward_start`, when the loss's forward
// began, to now), `rows` to its rows.
void gradient_step(FlatAdam& optimizer, const torch::Tensor& loss, double max_grad_norm,
                   std::chrono::steady_clock::time_point forward_start, std::int64_t rows, LearnerTimes* times);

// optimizer.load(tensors), a failure as ConfigError naming the checkpoint `path`.
void load_optimizer(FlatAdam& optimizer, const std::map<std::string, torch::Tensor>& tensors, const std::string& path);

}  // namespace distrl::agent
