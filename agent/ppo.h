// PPO (clipped surrogate, Schulman et al. 2017) for the agent: acting with an actor-critic
// network (act answers carry the critic's value), GAE(lambda) over trajectories, several
// epochs of shuffled minibatches, value loss (optionally clipped), entropy bonus, gradient
// clipping, running observation normalisation and reward scaling.
// A Learner (learner.h): each round takes one trajectory of ppo.steps steps per env from every
// observer (they wait at its end while it learns); the running reward is the mean return of the
// last `solved_window` episodes, and a run counts as solved only once that many have ended.
#pragma once

#include <torch/types.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <vector>

#include "agent/flat_adam.h"
#include "agent/learner.h"
#include "agent/trajectories.h"
#include "rl/ppo_options.h"
#include "rl/protocol.h"
#include "models/actor_critic.h"

namespace distrl::agent {

// Running mean and variance (Chan et al. parallel update), for observation normalisation and
// reward scaling. Not thread-safe: the learner updates it under the actor's exclusive lock.
class RunningMeanStd {
 public:
  explicit RunningMeanStd(int dim = 1);
  void update(const float* x, std::size_t rows);
  // (x - mean) / sqrt(var + eps), clipped to +-clip; x is [B, dim].
  torch::Tensor normalize(const torch::Tensor& x, double clip = 10.0) const;
  const std::vector<double>& mean() const { return mean_; }
  const std::vector<double>& var() const { return var_; }
  double count() const { return count_; }
  // As tensors, for checkpoints.
  torch::Tensor state() const;
  void load(const torch::Tensor& state);

 private:
  void refresh();  // the float tensors normalize() uses, from mean_ and var_

  int dim_;
  std::vector<double> mean_, var_;
  double count_ = 1e-4;
  torch::Tensor mean_t_, std_t_;  // [dim] float32 on the CPU; rebuilt only when the statistics change
};

// Generalised advantage estimates for one fragment (time-major [steps, envs]); fills
// `returns` (= advantages + values). A terminated step does not bootstrap; a truncated one
// bootstraps with the critic's value of the episode's final observation (truncated_values;
// the step's own value when a fragment does not carry them).
std::vector<float> gae(const rl::Fragment& f, const std::vector<float>& rewards, double gamma, double lambda,
                       std::vector<float>* returns);

// Throws ProtocolError unless the fragment's arrays agree with its shape and the env's: a
// trajectory carries its policy versions, next and final observations (agent/trajectories.h);
// `bootstrapped` (what PPO's update takes): also its bootstrap values (Ppo::bootstrap).
void check_fragment(const rl::Fragment& f, int obs_dim, int act_dim, bool bootstrapped = false);

// The acting side: thread-safe act() for the batcher; the learner takes exclusive().
class PpoActor : public Actor {
 public:
  // The policy version the weights are (0 until an asynchronous learner publishes). Every
  // answer carries the version that chose it. set_version: with exclusive() held.
  PpoActor(std::shared_ptr<models::ActorCritic> net, torch::Device device, bool norm_obs, std::uint64_t seed);
  // One action per row of obs (rows x obs_dim), with log-probs and values.
  rl::ActReply act(const float* obs, int rows) override;
  // The most likely action per row (evaluation).
  rl::ActReply act_greedy(const float* obs, int rows);
  // The critic's value per row (no action drawn).
  std::vector<float> values(const float* obs, int rows);
  rl::ActReply act_eval(const float* obs, int rows) override { return act_greedy(obs, rows); }
  std::unique_lock<std::shared_mutex> exclusive() override { return std::unique_lock<std::shared_mutex>(mu_); }
  models::ActorCritic& net() { return *net_; }
  torch::Device device() const { return device_; }
  RunningMeanStd& obs_rms() { return obs_rms_; }
  bool norm_obs() const { return norm_obs_; }
  torch::Tensor prepare(const torch::Tensor& obs) const;  // normalised when enabled, on the device
  void set_version(std::int64_t v) { version_ = v; }
  std::int64_t version() const { return version_; }

 private:
  rl::ActReply act_impl(const float* obs, int rows, bool greedy);
  std::shared_ptr<models::ActorCritic> net_;
  torch::Device device_;
  bool norm_obs_;
  RunningMeanStd obs_rms_;
  std::int64_t version_ = 0;  // under mu_
  std::shared_mutex mu_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

// PPO's loss on one minibatch (all [B]): the clipped surrogate, the value loss (clipped
// around old_value when options.value_clip > 0), the entropy bonus, and their weighted sum.
struct PpoLoss {
  torch::Tensor total, policy, value, entropy;
};
PpoLoss ppo_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& adv,
                 const torch::Tensor& value, const torch::Tensor& old_value, const torch::Tensor& ret,
                 const torch::Tensor& entropy, const rl::PpoOptions& options);

// Reward scaling (ppo.norm_reward): each reward divided by the running std of the discounted
// return of its (observer, env), clipped to +-10. Keeps its statistics across fragments.
class RewardScaler {
 public:
  explicit RewardScaler(double gamma) : gamma_(gamma) {}
  // The fragment's rewards, scaled; the statistics first take in this fragment's returns.
  std::vector<float> scale(const rl::Fragment& f);
  RunningMeanStd& return_rms() { return rms_; }

 private:
  double gamma_;
  RunningMeanStd rms_;
  std::map<long, double> discounted_;  // per (observer, env): running discounted return
};

// The last `window` episode returns: the actor-critic learners' running reward (their mean) and
// "solved" (that mean reaches the target once `window` episodes have ended). Checkpointed.
class RecentReturns {
 public:
  explicit RecentReturns(int window) : window_(window) {}
  double running(const std::vector<double>& returns, double previous);
  bool solved(double running, double target) const;
  torch::Tensor state() const;
  void load(const torch::Tensor& state);

 private:
  int window_;
  std::deque<double> recent_;
};

struct PpoStats {
  double policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clip_fraction = 0;
  std::size_t transitions = 0;
};

class Ppo : public Learner {
 public:
  Ppo(PpoActor& actor, rl::PpoOptions options, TrajectoryOptions intake = {}, int solved_window = 100);
  // Fills a trajectory's bootstrap values with the critic's values of its next_obs
  // (last_values) and of its truncated episodes' final observations (truncated_values): the
  // weights that acted, since acting waits while the round learns.
  void bootstrap(rl::Fragment& f);
  // One PPO update over bootstrapped trajectories (checked first); takes the actor's exclusive lock.
  PpoStats update(const std::vector<rl::Fragment>& fragments);
  RunningMeanStd& return_rms() { return scaler_.return_rms(); }

  RoundData round(ObserverPool& pool, bool learn) override;
  Trajectories& trajectories() override { return intake_; }
  double running_reward(const std::vector<double>& returns, double previous) override;
  bool solved(double running_reward, double target) const override;
  // Also the observation and return statistics and the recent returns.
  void save(const std::string& path, const std::map<std::string, double>& numbers) override;
  std::map<std::string, double> load(const std::string& path) override;
  std::string resume_note() const override;
  LearnerTimes times() const override { return times_; }

 private:
  PpoActor& actor_;
  LearnerTimes times_;
  rl::PpoOptions o_;
  Trajectories intake_;
  RecentReturns recent_;
  FlatAdam optimizer_;
  RewardScaler scaler_;
  std::mt19937_64 rng_;
};

}  // namespace distrl::agent
