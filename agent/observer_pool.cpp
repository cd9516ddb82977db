#include "agent/observer_pool.h"

#include "common/error.h"
#include "common/log.h"

namespace distrl::agent {

ObserverPool::ObserverPool(transport::RpcAgent& rpc, const rl::RlConfig& cfg, Batcher* batcher)
    : rpc_(rpc), batcher_(batcher),
      timeout_(std::chrono::milliseconds(static_cast<long long>(cfg.rpc_timeout_s * 1000))) {
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
    spec.max_episode_steps = cfg.max_steps;
    obs_.push_back(rpc.remote<rl::ObserverObject>(w.name, rl::kObserverClass, spec));
  }
  alive_.assign(obs_.size(), true);
  drops_.assign(obs_.size(), 0);
  for (auto& r : obs_) r.created().value();
}

void ObserverPool::drop(std::size_t i, Trajectories& trajectories, const std::string& why) {
  alive_[i] = false;
  ++drops_[i];
  ++lost_;
  if (batcher_) batcher_->set_active(static_cast<int>(i), false);
  trajectories.forget(static_cast<int>(i));
  DISTRL_LOG(Warn, "agent: dropping observer " << i << " (" << obs_[i].owner_name() << "): " << why
                                               << "; its envs leave the batch, its unfinished trajectory is "
                                                  "discarded (taken back if it steps again)");
}

void ObserverPool::start(Trajectories& trajectories) {
  if (started_) return;
  started_ = true;
  std::vector<transport::Future<int>> futs;
  for (auto& o : obs_) futs.push_back(o.rpc_async<int>(rl::kRunStream, 0));
  std::string last_error;
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    try {
      futs[i].value();
      if (batcher_) batcher_->set_active(static_cast<int>(i), true);
    } catch (const std::exception& e) {
      last_error = e.what();
      drop(i, trajectories, std::string("its loop did not start: ") + e.what());
    }
  }
  if (lost_ == size()) throw TransportError("no observer's loop started; the last error: " + last_error);
}

void ObserverPool::check(Trajectories& trajectories) {
  int live = 0;
  for (std::size_t i = 0; i < obs_.size(); ++i) {
    const int id = static_cast<int>(i);
    const bool connected = !rpc_.connection_lost(obs_[i].owner_name());
    if (!alive_[i]) {
      // It stepped again, and its connection is back (a step can come in before the heartbeat
      // that brings the connection back up: it waits for that, or it would be dropped again).
      if (!trajectories.live(id) || !connected) continue;
      alive_[i] = true;
      --lost_;
      ++readmitted_;
      if (batcher_) batcher_->set_active(id, true);
      DISTRL_LOG(Warn, "agent: observer " << i << " (" << obs_[i].owner_name() << ") is reachable again: readmitted");
    } else if (!connected) {
      drop(i, trajectories,
           "its connection " + rpc_.worker(obs_[i].owner_name()).endpoint +
               " was lost (the process exited or crashed, or its host became unreachable)");
      continue;
    }
    ++live;
  }
  if (live == 0) throw TransportError("every observer is gone (their connections dropped, or they stopped stepping)");
}

std::vector<rl::Fragment> ObserverPool::gather(Trajectories& trajectories) {
  start(trajectories);
  std::vector<rl::Fragment> out;
  std::vector<bool> got(obs_.size(), false);
  const auto since = std::chrono::steady_clock::now();
  // The observers held at this round's end wait for its answer within their own rpc.timeout_s,
  // and some were held before this round began (while the last one saved): a straggler is
  // dropped at half of it, so that the round still learns and answers them in time.
  const auto patience = timeout_ / 2;
  for (;;) {
    check(trajectories);  // throws when none is left
    int missing = 0;
    for (std::size_t i = 0; i < obs_.size(); ++i) missing += alive_[i] && !got[i];
    if (missing == 0) return out;
    if (std::chrono::steady_clock::now() - since > patience) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(patience).count();
      const std::string waited =
          (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") + " (half of rpc.timeout_s)";
      for (std::size_t i = 0; i < obs_.size(); ++i)
        if (alive_[i] && !got[i]) drop(i, trajectories, "no trajectory for " + waited);
      if (!out.empty()) return out;
      throw TransportError("no observer sent a trajectory for " + waited + ": are they stalled?");
    }
    for (auto& f : trajectories.pop(missing, std::chrono::milliseconds(200))) {
      if (f.observer_id >= 0 && f.observer_id < size()) got[static_cast<std::size_t>(f.observer_id)] = true;
      out.push_back(std::move(f));
    }
  }
}

void ObserverPool::finish() {
  std::vector<transport::Future<void>> done;
  for (std::size_t i = 0; i < obs_.size(); ++i)
    if (alive_[i] || !rpc_.connection_lost(obs_[i].owner_name()))  // one that stalled and runs again is told too
      done.push_back(obs_[i].rpc_async<void>(rl::kFinish));
  for (auto& f : done) {
    try {
      f.value();
    } catch (const std::exception& e) {
      DISTRL_LOG(Warn, "agent: an observer did not take 'finish': " << e.what());
    }
  }
}

}  // namespace distrl::agent
