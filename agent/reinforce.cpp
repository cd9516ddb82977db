#include "agent/reinforce.h"

#include <torch/types.h>

#include <numeric>

#include "agent/observer_pool.h"
#include "common/error.h"
#include "models/checkpoint.h"

namespace distrl::agent {

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

Episodes EpisodeCutter::cut(const std::vector<rl::Fragment>& trajectories) {
  Episodes out;
  for (const auto& f : trajectories) {
    const std::size_t dim = static_cast<std::size_t>(obs_dim_);
    const bool after_drop = forgotten_.erase(f.observer_id) > 0;
    for (int e = 0; e < f.num_envs; ++e) {
      Running& r = running_[{f.observer_id, e}];
      if (after_drop) r = Running{{}, {}, {}, true};
      for (int t = 0; t < f.steps; ++t) {
        const std::size_t i = static_cast<std::size_t>(t) * f.num_envs + e;
        r.obs.insert(r.obs.end(), f.obs.begin() + i * dim, f.obs.begin() + (i + 1) * dim);
        r.actions.push_back(f.actions[i]);
        r.rewards.push_back(f.rewards[i]);
        if (!f.terminated[i] && !f.truncated[i]) continue;
        if (r.partial) {  // began before the observer was dropped: not a whole episode
          r = Running{};
          continue;
        }
        out.obs.insert(out.obs.end(), r.obs.begin(), r.obs.end());
        out.actions.insert(out.actions.end(), r.actions.begin(), r.actions.end());
        out.rewards.insert(out.rewards.end(), r.rewards.begin(), r.rewards.end());
        out.lengths.push_back(static_cast<std::int32_t>(r.rewards.size()));
        r = Running{};
      }
    }
  }
  return out;
}

void EpisodeCutter::forget(int observer) {
  for (auto it = running_.begin(); it != running_.end();)
    it = it->first.first == observer ? running_.erase(it) : std::next(it);
  forgotten_.insert(observer);
}

std::size_t EpisodeCutter::unfinished_steps() const {
  std::size_t n = 0;
  for (const auto& [key, r] : running_) n += r.rewards.size();
  return n;
}

Reinforce::Reinforce(PolicyActor& actor, ReinforceOptions options, TrajectoryOptions intake)
    : actor_(actor), options_(options), optimizer_(actor.net().parameters(), torch::optim::AdamOptions(options.lr)),
      intake_(intake), cutter_(actor.obs_dim()) {}

double Reinforce::update(const Episodes& episodes) {
  std::vector<float> returns = rewards_to_go(episodes.rewards, episodes.lengths, options_.gamma);
  std::vector<std::int64_t> actions(episodes.actions.begin(), episodes.actions.end());
  const auto n = static_cast<std::int64_t>(returns.size());
  if (n == 0) return 0.0;
  if (episodes.obs.size() != static_cast<std::size_t>(n) * actor_.obs_dim() || actions.size() != returns.size())
    throw ProtocolError("REINFORCE: " + std::to_string(n) + " rewards but " + std::to_string(actions.size()) +
                        " actions and " + std::to_string(episodes.obs.size()) + " observation floats");
  const auto dev = actor_.device();
  // Read only (the forward's input): no copy of the episodes' observations.
  auto x = torch::from_blob(const_cast<float*>(episodes.obs.data()), {n, actor_.obs_dim()}, torch::kFloat32).to(dev);
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
  auto trajectories = pool.gather(intake_);
  ReleaseAtEnd release{intake_};  // the observers held at the round's end act with the new weights
  // An observer dropped since the last round (this round's trajectories from it may begin after
  // the drop, mid-episode): its episodes are cut at their next end, unlearned.
  drops_seen_.resize(static_cast<std::size_t>(pool.size()), 0);
  for (int i = 0; i < pool.size(); ++i)
    if (const auto d = pool.drops(i); d != drops_seen_[i]) {
      cutter_.forget(i);
      drops_seen_[i] = d;
    }
  const Episodes episodes = cutter_.cut(trajectories);
  RoundData d;
  if (learn) d.loss = update(episodes);
  std::size_t at = 0;
  for (auto len : episodes.lengths) {
    d.returns.push_back(std::accumulate(episodes.rewards.begin() + at, episodes.rewards.begin() + at + len, 0.0));
    at += static_cast<std::size_t>(len);
  }
  for (const auto& f : trajectories) d.add_acting(f);
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
