// REINFORCE as in PyTorch's RL tutorials: rewards-to-go with discount gamma per episode
// segment, returns normalised over the whole update, loss = -sum(log pi(a|s) * G), Adam.
// A Learner (learner.h): each round every observer plays one episode (run_episode); the
// running reward is the tutorial's exponential average (0.05 new, 0.95 old).
#pragma once

#include <torch/optim/adam.h>

#include <memory>
#include <vector>

#include "agent/learner.h"
#include "agent/policy_actor.h"
#include "rl/protocol.h"

namespace distrl::agent {

struct ReinforceOptions {
  double gamma = 0.99;
  double lr = 1e-2;
  double eps = 1e-7;  // added to the returns' std before dividing
  int max_steps = 500;  // per episode: what run_episode is asked for
};

// Throws ProtocolError unless the rollout's arrays agree: obs_dim floats, one action and one
// log-prob per reward, segment lengths covering every reward, one terminated flag per segment.
void check_rollout(const rl::Rollout& r, int obs_dim);

// Discounted rewards-to-go, restarting at each segment boundary. Exposed for tests.
std::vector<float> rewards_to_go(const std::vector<float>& rewards, const std::vector<std::int32_t>& lengths,
                                 double gamma);

class Reinforce : public Learner {
 public:
  Reinforce(PolicyActor& actor, ReinforceOptions options);
  // One gradient step over the rollouts; returns the loss. Takes the actor's exclusive lock.
  double update(const std::vector<rl::Rollout>& rollouts);
  torch::optim::Adam& optimizer() { return optimizer_; }

  bool fragments() const override { return false; }
  RoundData round(ObserverPool& pool, bool learn) override;
  double running_reward(const std::vector<double>& returns, double previous) override;
  bool solved(double running_reward, double target) const override { return running_reward >= target; }
  void save(const std::string& path, const std::map<std::string, double>& numbers) override;
  std::map<std::string, double> load(const std::string& path) override;

 private:
  PolicyActor& actor_;
  ReinforceOptions options_;
  torch::optim::Adam optimizer_;
};

}  // namespace distrl::agent
