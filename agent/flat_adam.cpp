#include "agent/flat_adam.h"

#include <cmath>
#include <stdexcept>

#include "common/error.h"
#include "common/log.h"

namespace distrl::agent {

FlatAdam::FlatAdam(torch::nn::Module& module, double lr, double eps, double beta1, double beta2)
    : params_(module.parameters()), lr_(lr), eps_(eps), beta1_(beta1), beta2_(beta2) {
  flatten();
  m_ = torch::zeros_like(flat_);
  v_ = torch::zeros_like(flat_);
}

void FlatAdam::flatten() {
  torch::NoGradGuard g;
  std::int64_t total = 0;
  for (const auto& p : params_) total += p.numel();
  const auto options = params_.empty() ? torch::TensorOptions() : params_.front().options();
  auto flat = torch::empty({total}, options.requires_grad(false));
  grad_ = torch::zeros({total}, options.requires_grad(false));
  std::int64_t at = 0;
  for (auto& p : params_) {
    const auto n = p.numel();
    auto view = flat.narrow(0, at, n).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
    p.mutable_grad() = grad_.narrow(0, at, n).view(p.sizes());
    at += n;
  }
  flat_ = flat;
}

double FlatAdam::clip_grad_norm(double max_norm) {
  const double norm = grad_.norm().item<double>();
  const double coef = max_norm / (norm + 1e-6);  // as torch::nn::utils::clip_grad_norm_
  if (coef < 1) grad_.mul_(coef);
  return norm;
}

void FlatAdam::step() {
  torch::NoGradGuard g;
  ++step_;
  m_.mul_(beta1_).add_(grad_, 1 - beta1_);
  v_.mul_(beta2_).addcmul_(grad_, grad_, 1 - beta2_);
  const double bias1 = 1 - std::pow(beta1_, static_cast<double>(step_));
  const double bias2 = 1 - std::pow(beta2_, static_cast<double>(step_));
  const auto denom = (v_.sqrt() / std::sqrt(bias2)).add_(eps_);
  flat_.addcdiv_(m_, denom, -lr_ / bias1);
}

std::map<std::string, torch::Tensor> FlatAdam::state() const {
  return {{"adam.m", m_.to(torch::kCPU)},
          {"adam.v", v_.to(torch::kCPU)},
          {"adam.step", torch::tensor({static_cast<double>(step_)}, torch::kDouble)}};
}

void FlatAdam::load(const std::map<std::string, torch::Tensor>& tensors) {
  const auto m = tensors.find("adam.m"), v = tensors.find("adam.v"), s = tensors.find("adam.step");
  if (m == tensors.end() || v == tensors.end() || s == tensors.end()) return;
  if (m->second.numel() != flat_.numel() || v->second.numel() != flat_.numel())
    throw std::invalid_argument("the optimizer state holds " + std::to_string(m->second.numel()) +
                                " values for a model of " + std::to_string(flat_.numel()));
  torch::NoGradGuard g;
  m_.copy_(m->second.view({-1}));
  v_.copy_(v->second.view({-1}));
  step_ = static_cast<long long>(s->second.to(torch::kDouble).item<double>());
}

void gradient_step(FlatAdam& optimizer, const torch::Tensor& loss, double max_grad_norm,
                   std::chrono::steady_clock::time_point forward_start, std::int64_t rows, LearnerTimes* times) {
  using Clock = std::chrono::steady_clock;
  const auto t1 = Clock::now();
  optimizer.zero_grad();
  loss.backward();
  const auto t2 = Clock::now();
  optimizer.clip_grad_norm(max_grad_norm);
  optimizer.step();
  const auto t3 = Clock::now();
  times->forward_s += seconds_between(forward_start, t1);
  times->backward_s += seconds_between(t1, t2);
  times->optimizer_s += seconds_between(t2, t3);
  ++times->steps;
  times->rows += rows;
}

void load_optimizer(FlatAdam& optimizer, const std::map<std::string, torch::Tensor>& tensors, const std::string& path) {
  if (!tensors.count("adam.m"))
    DISTRL_LOG(Warn, "checkpoint '" << path
                                    << "' holds no Adam state of this version (saved before FlatAdam): "
                                       "the weights load, Adam's moments start from zero");
  try {
    optimizer.load(tensors);
  } catch (const std::invalid_argument& e) {
    throw ConfigError("checkpoint '" + path + "' does not fit this model: " + e.what());
  }
}

}  // namespace distrl::agent
