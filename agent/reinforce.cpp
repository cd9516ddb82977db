#include "agent/reinforce.h"

#include <torch/torch.h>

#include "common/error.h"

namespace distrl::agent {

void check_rollout(const rl::Rollout& r, int obs_dim) {
  const std::size_t n = r.steps();
  const auto fail = [&](const std::string& what) {
    throw ProtocolError("rollout from observer " + std::to_string(r.observer_id) + ": " + what);
  };
  if (r.obs_dim != obs_dim) fail("obs_dim " + std::to_string(r.obs_dim) + ", expected " + std::to_string(obs_dim));
  if (r.obs.size() != n * static_cast<std::size_t>(obs_dim) || r.actions.size() != n || r.log_probs.size() != n)
    fail(std::to_string(n) + " rewards but " + std::to_string(r.actions.size()) + " actions, " +
         std::to_string(r.log_probs.size()) + " log-probs and " + std::to_string(r.obs.size()) +
         " observation floats");
  if (r.terminated.size() != r.lengths.size())
    fail(std::to_string(r.lengths.size()) + " segments but " + std::to_string(r.terminated.size()) + " end flags");
  std::size_t covered = 0;
  for (std::int32_t len : r.lengths) {
    if (len < 0) fail("negative segment length " + std::to_string(len));
    covered += static_cast<std::size_t>(len);
  }
  if (covered != n) fail("segment lengths cover " + std::to_string(covered) + " of " + std::to_string(n) + " steps");
}

std::vector<float> rewards_to_go(const std::vector<float>& rewards, const std::vector<std::int32_t>& lengths,
                                 double gamma) {
  std::vector<float> out(rewards.size());
  std::size_t end = 0;
  for (std::int32_t len : lengths) {
    const std::size_t begin = end;
    end += static_cast<std::size_t>(len);
    if (len < 0 || end > rewards.size())
      throw ProtocolError("rollout: segment lengths add up past its " + std::to_string(rewards.size()) + " rewards");
    double g = 0;
    for (std::size_t t = end; t-- > begin;) {
      g = rewards[t] + gamma * g;
      out[t] = static_cast<float>(g);
    }
  }
  if (end != rewards.size())
    throw ProtocolError("rollout: segment lengths cover " + std::to_string(end) + " of " +
                        std::to_string(rewards.size()) + " rewards");
  return out;
}

Reinforce::Reinforce(PolicyActor& actor, ReinforceOptions options)
    : actor_(actor), options_(options),
      optimizer_(actor.net().parameters(), torch::optim::AdamOptions(options.lr)) {}

double Reinforce::update(const std::vector<rl::Rollout>& rollouts) {
  std::vector<float> obs, returns;
  std::vector<std::int64_t> actions;
  for (const auto& r : rollouts) {
    check_rollout(r, actor_.obs_dim());
    auto g = rewards_to_go(r.rewards, r.lengths, options_.gamma);
    obs.insert(obs.end(), r.obs.begin(), r.obs.end());
    returns.insert(returns.end(), g.begin(), g.end());
    actions.insert(actions.end(), r.actions.begin(), r.actions.end());
  }
  const auto n = static_cast<std::int64_t>(returns.size());
  if (n == 0) return 0.0;
  const auto dev = actor_.device();
  auto x = torch::from_blob(obs.data(), {n, actor_.obs_dim()}, torch::kFloat32).to(dev);
  auto a = torch::from_blob(actions.data(), {n, 1}, torch::kInt64).to(dev);
  auto g = torch::from_blob(returns.data(), {n}, torch::kFloat32).to(dev);
  if (n > 1) g = (g - g.mean()) / (g.std() + options_.eps);

  auto lock = actor_.exclusive();
  actor_.net().train();
  auto logp = torch::log_softmax(actor_.net().forward(x), 1).gather(1, a).squeeze(1);
  auto loss = -(logp * g).sum();
  optimizer_.zero_grad();
  loss.backward();
  optimizer_.step();
  actor_.net().eval();
  return loss.item<double>();
}

}  // namespace distrl::agent
