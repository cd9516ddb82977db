#include "agent/reinforce.h"

#include <torch/types.h>

#include <numeric>

#include "agent/observer_pool.h"
#include "common/error.h"
#include "models/checkpoint.h"

namespace distrl::agent {

void check_rollout(const rl::Rollout& r, int obs_dim) {
  const std::size_t n = r.steps();
  const auto fail = [&](const std::string& what) {
    throw ProtocolError("rollout from observer " + std::to_string(r.observer_id) + ": " + what);
  };
  if (r.obs_dim != obs_dim) fail("obs_dim " + std::to_string(r.obs_dim) + ", expected " + std::to_string(obs_dim));
  if (!(r.cpu_us >= 0 && r.cpu_us < 1e15)) fail("cpu_us " + std::to_string(r.cpu_us) + " is not a CPU time");
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

RoundData Reinforce::round(ObserverPool& pool, bool learn) {
  const int dim = actor_.obs_dim();
  auto rollouts = pool.call<rl::Rollout>(rl::kRunEpisode, options_.max_steps,
                                         [dim](const rl::Rollout& r) { check_rollout(r, dim); });
  RoundData d;
  if (learn) d.loss = update(rollouts);
  for (auto& r : rollouts) {
    std::size_t at = 0;
    for (auto len : r.lengths) {
      d.returns.push_back(std::accumulate(r.rewards.begin() + at, r.rewards.begin() + at + len, 0.0));
      at += len;
    }
    d.env_steps += static_cast<long long>(r.steps());
    d.latency_us.insert(d.latency_us.end(), r.latency_us.begin(), r.latency_us.end());
    d.observer_cpu_us += r.cpu_us;
  }
  return d;
}

double Reinforce::running_reward(const std::vector<double>& returns, double previous) {
  if (returns.empty()) return previous;
  const double mean = std::accumulate(returns.begin(), returns.end(), 0.0) / static_cast<double>(returns.size());
  return 0.05 * mean + 0.95 * previous;
}

void Reinforce::save(const std::string& path, const std::map<std::string, double>& numbers) {
  auto lock = actor_.exclusive();
  models::save_checkpoint(path, actor_.net(), &optimizer_, numbers);
}

std::map<std::string, double> Reinforce::load(const std::string& path) {
  auto lock = actor_.exclusive();
  auto numbers = models::load_checkpoint(path, actor_.net(), &optimizer_, actor_.device());
  actor_.net().eval();
  return numbers;
}

}  // namespace distrl::agent
