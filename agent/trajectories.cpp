#include "agent/trajectories.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace distrl::agent {

struct Trajectories::Slot {
  std::mutex mu;
  rl::Fragment building;        // the trajectory so far
  std::uint64_t next_step = 0;  // the StepReport::step expected next
  bool forgotten = false;
  // The observations last reported, and what the forward chose for them.
  std::vector<float> pending_obs;
  rl::ActReply pending;
  bool acted = false;
};

Trajectories::Trajectories(TrajectoryOptions options) : o_(options) { set_observers(o_.observers); }

void Trajectories::set_observers(int observers) {
  o_.observers = observers;
  slots_.clear();
  for (int i = 0; i < observers; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->building = empty_fragment(i);
  }
}

Trajectories::~Trajectories() { close(); }

rl::Fragment Trajectories::empty_fragment(int observer) const {
  rl::Fragment f;
  f.observer_id = observer;
  f.obs_dim = o_.obs_dim;
  f.act_dim = o_.act_dim;
  f.num_envs = o_.envs;
  f.steps = 0;
  return f;
}

void Trajectories::check(const rl::StepReport& r, const Slot& slot) const {
  auto bad = [&](const std::string& what) {
    throw ProtocolError("act from observer " + std::to_string(r.observer_id) + ": " + what);
  };
  const std::size_t n = static_cast<std::size_t>(o_.envs), dim = static_cast<std::size_t>(o_.obs_dim);
  if (slot.forgotten) bad("this observer was dropped from the run");
  if (r.step != slot.next_step)
    bad("step " + std::to_string(r.step) + " where " + std::to_string(slot.next_step) +
        " was expected (a step lost or sent twice)");
  if (r.obs.size() != n * dim)
    bad(std::to_string(r.obs.size()) + " observation floats; " + std::to_string(n) + " envs x " + std::to_string(dim) +
        " expected");
  for (float x : r.obs)
    if (!std::isfinite(x)) bad("an observation is not finite");
  if (!(r.cpu_us >= 0 && r.cpu_us < 1e15)) bad("cpu_us " + std::to_string(r.cpu_us) + " is not a CPU time");
  if (r.step == 0) {
    if (!r.rewards.empty() || !r.terminated.empty() || !r.truncated.empty() || !r.final_obs.empty() ||
        !r.episode_returns.empty())
      bad("outcomes in the first step, before any action");
    return;
  }
  if (!slot.acted) bad("a step before the answer to the previous one");
  if (r.rewards.size() != n || r.terminated.size() != n || r.truncated.size() != n)
    bad(std::to_string(r.rewards.size()) + " rewards, " + std::to_string(r.terminated.size()) + " terminations and " +
        std::to_string(r.truncated.size()) + " truncations for " + std::to_string(n) + " envs");
  std::size_t cut = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(r.rewards[i])) bad("reward " + std::to_string(r.rewards[i]) + " of env " + std::to_string(i));
    if (r.terminated[i] > 1 || r.truncated[i] > 1) bad("a termination or truncation flag is not 0 or 1");
    cut += r.truncated[i] && !r.terminated[i];
  }
  if (r.final_obs.size() != cut * dim)
    bad(std::to_string(r.final_obs.size()) + " final-observation floats for " + std::to_string(cut) +
        " truncated episodes of " + std::to_string(dim));
  for (float x : r.final_obs)
    if (!std::isfinite(x)) bad("a final observation is not finite");
  if (r.episode_returns.size() != r.episode_lengths.size()) bad("episode returns and lengths differ in number");
  for (float x : r.episode_returns)
    if (!std::isfinite(x)) bad("an episode return is not finite");
}

bool Trajectories::observe(const rl::StepReport& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
  }
  if (r.observer_id < 0 || r.observer_id >= o_.observers)
    throw ProtocolError("act: observer id " + std::to_string(r.observer_id) + " is not one of this run's 0.." +
                        std::to_string(o_.observers - 1));
  Slot& slot = *slots_[static_cast<std::size_t>(r.observer_id)];
  rl::Fragment done;
  bool finished = false;
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    try {
      check(r, slot);
    } catch (const ProtocolError&) {
      std::lock_guard<std::mutex> g(mu_);
      ++stats_.refused;
      throw;
    }
    rl::Fragment& f = slot.building;
    if (r.step > 0) {  // complete the previous step
      const rl::ActReply& a = slot.pending;
      f.obs.insert(f.obs.end(), slot.pending_obs.begin(), slot.pending_obs.end());
      f.actions.insert(f.actions.end(), a.actions.begin(), a.actions.end());
      f.cont_actions.insert(f.cont_actions.end(), a.cont_actions.begin(), a.cont_actions.end());
      f.log_probs.insert(f.log_probs.end(), a.log_probs.begin(), a.log_probs.end());
      f.values.insert(f.values.end(), a.values.begin(), a.values.end());
      f.versions.push_back(a.version);
      f.rewards.insert(f.rewards.end(), r.rewards.begin(), r.rewards.end());
      f.terminated.insert(f.terminated.end(), r.terminated.begin(), r.terminated.end());
      f.truncated.insert(f.truncated.end(), r.truncated.begin(), r.truncated.end());
      f.final_obs.insert(f.final_obs.end(), r.final_obs.begin(), r.final_obs.end());
      f.episode_returns.insert(f.episode_returns.end(), r.episode_returns.begin(), r.episode_returns.end());
      f.episode_lengths.insert(f.episode_lengths.end(), r.episode_lengths.begin(), r.episode_lengths.end());
      if (r.latency_us >= 0) f.latency_us.push_back(r.latency_us);
      f.cpu_us += r.cpu_us;
      ++f.steps;
      if (f.steps == o_.rollout) {
        f.next_obs = r.obs;
        done = std::move(f);
        f = empty_fragment(r.observer_id);
        finished = true;
      }
    }
    slot.pending_obs = r.obs;
    slot.acted = false;
    ++slot.next_step;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (r.step > 0) stats_.steps += o_.envs;
  }
  if (finished) push(std::move(done));
  return true;
}

void Trajectories::acted(int observer, const rl::ActReply& reply) {
  Slot& slot = *slots_.at(static_cast<std::size_t>(observer));
  std::lock_guard<std::mutex> lock(slot.mu);
  slot.pending = reply;
  slot.acted = true;
}

void Trajectories::push(rl::Fragment&& f) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  const bool room = room_.wait_for(lock, o_.push_timeout, [&] {
    return closed_ || queue_.size() < static_cast<std::size_t>(o_.queue);
  });
  stats_.waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (closed_) {
    stats_.discarded += static_cast<long long>(f.transitions());
    return;
  }
  if (!room) {
    ++stats_.dropped_full;
    DISTRL_LOG(Warn, "agent: the learner took no trajectory for " << o_.push_timeout.count()
                                                                  << " ms; dropped one of observer " << f.observer_id);
    return;
  }
  queue_.push_back(std::move(f));
  ++stats_.queued;
  ready_.notify_one();
}

std::vector<rl::Fragment> Trajectories::pop(int n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  ready_.wait_for(lock, timeout, [&] { return closed_ || queue_.size() >= static_cast<std::size_t>(n); });
  std::vector<rl::Fragment> out;
  while (!queue_.empty() && static_cast<int>(out.size()) < n) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  if (!out.empty()) room_.notify_all();
  return out;
}

void Trajectories::forget(int observer) {
  Slot& slot = *slots_.at(static_cast<std::size_t>(observer));
  long long steps = 0;
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    slot.forgotten = true;
    steps = static_cast<long long>(slot.building.transitions());
    slot.building = empty_fragment(observer);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.discarded += steps;
}

void Trajectories::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  for (const auto& f : queue_) stats_.discarded += static_cast<long long>(f.transitions());
  queue_.clear();
  room_.notify_all();
  ready_.notify_all();
}

TrajectoryStats Trajectories::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace distrl::agent
