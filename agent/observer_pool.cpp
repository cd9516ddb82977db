#include "agent/observer_pool.h"

namespace distrl::agent {

ObserverPool::ObserverPool(transport::RpcAgent& rpc, const rl::RlConfig& cfg, bool fragments, Batcher* batcher)
    : batcher_(batcher) {
  for (const auto& w : rpc.workers()) {
    if (w.rank == rpc.rank()) continue;
    rl::ObserverSpec spec;
    spec.agent = rpc.name();
    spec.observer_id = static_cast<int>(obs_.size());
    spec.env = cfg.env;
    spec.num_envs = cfg.envs_per_observer;
    spec.seed = static_cast<std::uint64_t>(cfg.seed) * 1000003ull + 7919ull * (spec.observer_id + 1);
    spec.record_latency = true;
    spec.fragments = fragments;
    obs_.push_back(rpc.remote<rl::ObserverObject>(w.name, rl::kObserverClass, spec));
  }
  alive_.assign(obs_.size(), true);
  for (auto& r : obs_) r.created().value();
}

void ObserverPool::drop(std::size_t i, const std::exception& e) {
  alive_[i] = false;
  ++lost_;
  DISTRL_LOG(Warn, "agent: dropping observer " << i << " (" << obs_[i].owner_name() << "): " << e.what());
}

void ObserverPool::finish() {
  std::vector<transport::Future<void>> done;
  for (std::size_t i = 0; i < obs_.size(); ++i)
    if (alive_[i]) done.push_back(obs_[i].rpc_async<void>("finish"));
  for (auto& f : done) {
    try {
      f.value();
    } catch (const std::exception& e) {
      DISTRL_LOG(Warn, "agent: an observer did not take 'finish': " << e.what());
    }
  }
}

}  // namespace distrl::agent
