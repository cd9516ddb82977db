// PPO's hyper-parameters, torch-free so the run configuration can hold them directly
// (RlConfig::ppo, bound to the ppo.* keys; gamma and lr come from learner.*).
#pragma once

#include <cstdint>

namespace distrl::rl {

struct PpoOptions {
  double gamma = 0.99;
  double lambda = 0.95;     // GAE
  double clip = 0.2;        // surrogate ratio clip
  double value_clip = 0.0;  // 0: unclipped value loss
  double vf_coef = 0.5;
  double ent_coef = 0.0;
  double lr = 3e-4;
  double max_grad_norm = 0.5;
  int epochs = 10;
  int minibatch = 64;
  bool norm_obs = true;
  bool norm_reward = false;  // divide rewards by the running std of the discounted return
  bool norm_adv = true;
  std::uint64_t seed = 1;
};

}  // namespace distrl::rl
