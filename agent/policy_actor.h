// The agent's policy: the network on its device, action sampling for request batches, and
// the lock that keeps acting (shared) and learning (exclusive) apart.
//
// Acting runs the network in eval mode without autograd and samples from softmax(logits)
// with the actor's own seeded generator; learners recompute log-probabilities with
// gradients from the states the observers send back (one big forward instead of a graph
// kept alive per request).
#pragma once

#include <torch/types.h>

#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>

#include "agent/learner.h"
#include "rl/protocol.h"
#include "models/policy.h"

namespace distrl::agent {

// "cpu" or "cuda[:N]". Throws ConfigError when CUDA is asked for but not built in or absent.
torch::Device parse_device(const std::string& name, const std::string& key = "agent.device");

class PolicyActor : public Actor {
 public:
  PolicyActor(std::shared_ptr<models::PolicyNet> net, torch::Device device, int obs_dim, std::uint64_t seed);

  // One action per row of obs (rows x obs_dim floats). Thread-safe; concurrent calls share
  // the network.
  rl::ActReply act(const float* obs, int rows) override;
  rl::ActReply act_eval(const float* obs, int rows) override { return act(obs, rows); }

  // Held by a learner while it changes the weights; acting waits meanwhile.
  std::unique_lock<std::shared_mutex> exclusive() override { return std::unique_lock<std::shared_mutex>(mu_); }

  models::PolicyNet& net() { return *net_; }
  const std::shared_ptr<models::PolicyNet>& net_ptr() const { return net_; }
  torch::Device device() const { return device_; }
  int obs_dim() const { return obs_dim_; }

 private:
  std::shared_ptr<models::PolicyNet> net_;
  torch::Device device_;
  int obs_dim_;
  std::shared_mutex mu_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

}  // namespace distrl::agent
