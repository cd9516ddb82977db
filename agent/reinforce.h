// REINFORCE as in PyTorch's RL tutorials: rewards-to-go with discount gamma per episode
// segment, returns normalised over the whole update, loss = -sum(log pi(a|s) * G), Adam.
// A Learner (learner.h): each round every observer plays until each of its envs has ended an
// episode (one episode per observer with the tutorial's one env each), and the round learns
// from the whole episodes; the running reward is the tutorial's exponential average (0.05 new,
// 0.95 old). An env whose episode ended early goes on into its next one until the round's
// end; those steps join that episode's end in a later round (acted with the weights of one
// update before: the tutorial's shape, one env per observer, has none).
#pragma once

#include <torch/optim/adam.h>

#include <map>
#include <set>
#include <memory>
#include <utility>
#include <vector>

#include "agent/learner.h"
#include "agent/policy_actor.h"
#include "agent/trajectories.h"
#include "rl/protocol.h"

namespace distrl::agent {

struct ReinforceOptions {
  double gamma = 0.99;
  double lr = 1e-2;
  double eps = 1e-7;  // added to the returns' std before dividing
};

// Whole episodes, one after another.
struct Episodes {
  std::vector<float> obs;             // [steps, obs_dim]
  std::vector<std::int32_t> actions;  // [steps]
  std::vector<float> rewards;         // [steps]
  std::vector<std::int32_t> lengths;  // steps per episode
  std::size_t steps() const { return rewards.size(); }
};

// Cuts trajectories into whole episodes: the steps of an episode still running at a
// trajectory's end are kept, per observer and env, and lead its steps in the next one.
// Not thread-safe (the learner's thread).
class EpisodeCutter {
 public:
  explicit EpisodeCutter(int obs_dim) : obs_dim_(obs_dim) {}
  Episodes cut(const std::vector<rl::Fragment>& trajectories);
  // The observer was dropped: its envs' steps were not all seen, so its unfinished episodes go,
  // and so does the rest of each episode its next trajectories begin in (to its end, unlearned).
  void forget(int observer);
  std::size_t unfinished_steps() const;

 private:
  struct Running {
    std::vector<float> obs;
    std::vector<std::int32_t> actions;
    std::vector<float> rewards;
    bool partial = false;  // its beginning was not seen: dropped at its end
  };
  int obs_dim_;
  std::map<std::pair<int, int>, Running> running_;  // (observer, env)
  std::set<int> forgotten_;                         // their envs' first episodes are partial
};

// Discounted rewards-to-go, restarting at each segment boundary. Exposed for tests.
std::vector<float> rewards_to_go(const std::vector<float>& rewards, const std::vector<std::int32_t>& lengths,
                                 double gamma);

class Reinforce : public Learner {
 public:
  Reinforce(PolicyActor& actor, ReinforceOptions options, TrajectoryOptions intake = {});
  // One gradient step over the episodes; returns the loss. Takes the actor's exclusive lock.
  double update(const Episodes& episodes);
  torch::optim::Adam& optimizer() { return optimizer_; }

  RoundData round(ObserverPool& pool, bool learn) override;
  Trajectories& trajectories() override { return intake_; }
  bool actor_critic() const override { return false; }
  double running_reward(const std::vector<double>& returns, double previous) override;
  bool solved(double running_reward, double target) const override { return running_reward >= target; }
  void save(const std::string& path, const std::map<std::string, double>& numbers) override;
  std::map<std::string, double> load(const std::string& path) override;

 private:
  PolicyActor& actor_;
  ReinforceOptions options_;
  torch::optim::Adam optimizer_;
  Trajectories intake_;
  EpisodeCutter cutter_;
  std::vector<std::uint64_t> drops_seen_;  // per observer: ObserverPool::drops at the last round
};

}  // namespace distrl::agent
