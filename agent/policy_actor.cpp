#include "agent/policy_actor.h"

#include <ATen/ops/log_softmax.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include "common/config.h"
#include "common/error.h"

namespace distrl::agent {

torch::Device parse_device(const std::string& name, const std::string& key) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) == 0) {
#if DISTRL_WITH_CUDA
    if (!torch::cuda::is_available())
      throw ConfigError(
          key + " '" + name +
          "': no CUDA device is visible to this process (check nvidia-smi and CUDA_VISIBLE_DEVICES), or use --" + key +
          " cpu");
    try {
      return torch::Device(name);
    } catch (const std::exception& e) {
      throw ConfigError(key + " '" + name + "' is not a valid device (cuda or cuda:N)");
    }
#else
    throw ConfigError(key + " '" + name +
                      "': this build has no CUDA (the LibTorch it was built against is CPU-only); use --" + key +
                      " cpu or rebuild against a CUDA LibTorch with -DDISTRL_CUDA=ON");
#endif
  }
  throw ConfigError(key + " '" + name + "' is not one of: cpu, cuda, cuda:N");
}

void check_device(const std::string& name, const std::string& key) { parse_device(name, key); }

PolicyActor::PolicyActor(std::shared_ptr<models::PolicyNet> net, torch::Device device, int obs_dim, std::uint64_t seed)
    : net_(std::move(net)), device_(device), obs_dim_(obs_dim), rng_(seed) {
  net_->to(device_);
  net_->eval();
}

rl::ActReply PolicyActor::act(const float* obs, int rows) {
  torch::Tensor logp;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    c10::InferenceMode guard;
    auto x = torch::from_blob(const_cast<float*>(obs), {rows, obs_dim_}, torch::kFloat32);
    if (!device_.is_cpu()) x = x.to(device_);
    logp = at::log_softmax(net_->forward(x), 1);
    if (!device_.is_cpu()) logp = logp.cpu();
    logp = logp.contiguous();
  }
  const int n = static_cast<int>(logp.size(1));
  const float* lp = logp.data_ptr<float>();
  rl::ActReply out;
  out.actions.resize(rows);
  out.log_probs.resize(rows);
  std::lock_guard<std::mutex> lock(rng_mu_);
  for (int r = 0; r < rows; ++r) {
    const float* row = lp + static_cast<std::size_t>(r) * n;
    // Inverse-CDF sampling from softmax(logits) = exp(log_probs).
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    double cum = 0;
    int a = n - 1;
    for (int k = 0; k < n; ++k) {
      cum += std::exp(static_cast<double>(row[k]));
      if (u < cum) {
        a = k;
        break;
      }
    }
    out.actions[r] = a;
    out.log_probs[r] = row[a];
  }
  return out;
}

}  // namespace distrl::agent
