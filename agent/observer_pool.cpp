#include "agent/observer_pool.h"

namespace distrl::agent {

ObserverPool::ObserverPool(transport::RpcAgent& rpc, const rl::RlConfig& cfg, bool fragments, Batcher* batcher,
                           bool stream)
    : rpc_(rpc), batcher_(batcher) {
  for (const auto& w : rpc.workers()) {
    // The observers are the ranks after the agents and before the learner; this agent's share of
    // them is every roles.agents-th (rl::agent_of_observer).
    if (w.rank < cfg.agents || w.name == rl::kLearnerName || rl::agent_of_observer(w.rank, cfg.agents) != rpc.rank())
      continue;
    rl::ObserverSpec spec;
    spec.agent = rpc.name();
    spec.observer_id = static_cast<int>(obs_.size());
    spec.env = cfg.env;
    spec.num_envs = cfg.envs_per_observer;
    spec.seed = static_cast<std::uint64_t>(cfg.seed) * 1000003ull + 7919ull * (spec.observer_id + 1);
    spec.record_latency = true;
    spec.fragments = fragments && !stream;
    spec.stream = stream;
    obs_.push_back(rpc.remote<rl::ObserverObject>(w.name, rl::kObserverClass, spec));
  }
  alive_.assign(obs_.size(), true);
  may_return_.assign(obs_.size(), false);
  for (auto& r : obs_) r.created().value();
}

void ObserverPool::drop(std::size_t i, const std::exception& e, bool dropped_connection) {
  alive_[i] = false;
  // Not "is the connection down now": a drop and a reconnect can both come before this runs,
  // and such an observer must still be readmitted (it was, once, never again).
  may_return_[i] = dropped_connection || rpc_.connection_lost(obs_[i].owner_name());
  ++lost_;
  DISTRL_LOG(Warn, "agent: dropping observer " << i << " (" << obs_[i].owner_name() << "): " << e.what()
                                               << (may_return_[i] ? " (readmitted if its connection comes back)" : ""));
}

void ObserverPool::readmit() {
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    if (alive_[i] || !may_return_[i] || rpc_.connection_lost(obs_[i].owner_name())) continue;
    alive_[i] = true;
    may_return_[i] = false;
    --lost_;
    ++readmitted_;
    DISTRL_LOG(Warn, "agent: observer " << i << " (" << obs_[i].owner_name() << ") is reachable again: readmitted");
  }
}

void ObserverPool::start_streams(Trajectories& trajectories) {
  auto started = call<int>(rl::kRunStream, 0, [](int) {});  // drops (named) the ones that fail
  (void)started;
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    if (alive_[i]) {
      if (batcher_) batcher_->set_active(static_cast<int>(i), true);
    } else {
      trajectories.forget(static_cast<int>(i));
    }
  }
}

void ObserverPool::check_streams(Trajectories& trajectories) {
  int live = 0;
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    if (!alive_[i]) continue;
    if (rpc_.connection_lost(obs_[i].owner_name())) {
      alive_[i] = false;  // its loop has ended with the connection: it does not come back
      ++lost_;
      if (batcher_) batcher_->set_active(static_cast<int>(i), false);
      trajectories.forget(static_cast<int>(i));
      DISTRL_LOG(Warn, "agent: lost observer " << i << " (" << obs_[i].owner_name()
                                               << "): its connection dropped; its envs leave the batch and its "
                                                  "unfinished trajectory is discarded");
      continue;
    }
    ++live;
  }
  if (live == 0) throw TransportError("every observer is gone (their connections dropped)");
}

void ObserverPool::finish() {
  readmit();  // one that was stalled and runs again is told too, rather than left to time out
  std::vector<transport::Future<void>> done;
  for (std::size_t i = 0; i < obs_.size(); ++i)
    if (alive_[i]) done.push_back(obs_[i].rpc_async<void>(rl::kFinish));
  for (auto& f : done) {
    try {
      f.value();
    } catch (const std::exception& e) {
      DISTRL_LOG(Warn, "agent: an observer did not take 'finish': " << e.what());
    }
  }
}

}  // namespace distrl::agent
