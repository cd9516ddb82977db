// REINFORCE as in PyTorch's RL tutorials: rewards-to-go with discount gamma per episode
// segment, returns normalised over the whole update, loss = -sum(log pi(a|s) * G), Adam.
#pragma once

#include <torch/optim/adam.h>

#include <memory>
#include <vector>

#include "agent/policy_actor.h"
#include "rl/protocol.h"

namespace distrl::agent {

struct ReinforceOptions {
  double gamma = 0.99;
  double lr = 1e-2;
  double eps = 1e-7;  // added to the returns' std before dividing
};

// Throws ProtocolError unless the rollout's arrays agree: obs_dim floats, one action and one
// log-prob per reward, segment lengths covering every reward, one terminated flag per segment.
void check_rollout(const rl::Rollout& r, int obs_dim);

// Discounted rewards-to-go, restarting at each segment boundary. Exposed for tests.
std::vector<float> rewards_to_go(const std::vector<float>& rewards, const std::vector<std::int32_t>& lengths,
                                 double gamma);

class Reinforce {
 public:
  Reinforce(PolicyActor& actor, ReinforceOptions options);
  // One gradient step over the rollouts; returns the loss. Takes the actor's exclusive lock.
  double update(const std::vector<rl::Rollout>& rollouts);
  torch::optim::Adam& optimizer() { return optimizer_; }

 private:
  PolicyActor& actor_;
  ReinforceOptions options_;
  torch::optim::Adam optimizer_;
};

}  // namespace distrl::agent
