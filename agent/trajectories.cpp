#include "agent/trajectories.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace distrl::agent {
namespace {

// The first ten refusals are logged, then every thousandth: a flood of bad steps cannot flood the log.
bool should_log(long long refused) { return refused <= 10 || refused % 1000 == 0; }

}  // namespace

struct Trajectories::Slot {
  std::mutex mu;
  rl::Fragment building;        // the trajectory so far
  std::uint64_t next_step = 0;  // the StepReport::step expected next
  bool forgotten = false;
  // The observations last reported, and what the forward chose for them.
  std::vector<float> pending_obs;
  rl::ActReply pending;
  bool acted = false;
  std::vector<std::uint8_t> ended;  // Cut::Episodes: envs whose episode ended in this trajectory
};

Trajectories::Trajectories(TrajectoryOptions options) : o_(options) { set_observers(o_.observers); }

void Trajectories::set_observers(int observers, int queue) {
  o_.observers = observers;
  if (queue > 0) o_.queue = queue;
  slots_.clear();
  for (int i = 0; i < observers; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->building = empty_fragment(i);
    slots_.back()->ended.assign(static_cast<std::size_t>(o_.envs), 0);
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
  if (r.obs.size() != n * dim)
    bad(std::to_string(r.obs.size()) + " observation floats; " + std::to_string(n) + " envs x " + std::to_string(dim) +
        " expected");
  for (float x : r.obs)
    if (!std::isfinite(x)) bad("an observation is not finite");
  if (!(r.cpu_us >= 0 && r.cpu_us < 1e15)) bad("cpu_us " + std::to_string(r.cpu_us) + " is not a CPU time");
  if (!(r.latency_us == -1 || (r.latency_us >= 0 && r.latency_us < 1e12)))
    bad("latency_us " + std::to_string(r.latency_us) + " is not a round trip");
  if (slot.forgotten) return;                       // taken back: its outcomes are not used
  if (r.restart && r.step + 1 == slot.next_step) {  // a resend of the step taken last
    if (r.obs != slot.pending_obs) bad("a resend of step " + std::to_string(r.step) + " with other observations");
    return;
  }
  if (r.step != slot.next_step)
    bad("step " + std::to_string(r.step) + " where " + std::to_string(slot.next_step) +
        " was expected (a step lost or sent twice)");
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
  std::size_t ended = 0;
  for (std::size_t i = 0; i < n; ++i) ended += r.terminated[i] || r.truncated[i];
  if (r.episode_returns.size() != ended || r.episode_lengths.size() != ended)
    bad(std::to_string(r.episode_returns.size()) + " episode returns and " + std::to_string(r.episode_lengths.size()) +
        " lengths for " + std::to_string(ended) + " episodes that ended");
  for (float x : r.episode_returns)
    if (!std::isfinite(x)) bad("an episode return is not finite");
  for (auto len : r.episode_lengths)
    if (len < 1) bad("an episode length below 1");
}

Trajectories::Admit Trajectories::observe(const rl::StepReport& r, std::function<void()> resume) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Admit::Stop;
  }
  if (r.observer_id < 0 || r.observer_id >= o_.observers) {
    if (should_log(stats().refused + 1))
      DISTRL_LOG(Warn, "agent: refused a step from observer id " << r.observer_id << ": not one of this run's");
    throw ProtocolError("act: observer id " + std::to_string(r.observer_id) + " is not one of this run's 0.." +
                        std::to_string(o_.observers - 1));
  }
  Slot& slot = *slots_[static_cast<std::size_t>(r.observer_id)];
  rl::Fragment done;
  bool finished = false;
  enum class Kind { Step, Resend, Readmitted } kind = Kind::Step;
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    try {
      check(r, slot);
    } catch (const ProtocolError& e) {
      {
        std::lock_guard<std::mutex> g(mu_);
        ++stats_.refused;
      }
      if (should_log(stats().refused)) DISTRL_LOG(Warn, "agent: refused a step: " << e.what());  // names the observer
      throw;
    }
    if (slot.forgotten) {
      kind = Kind::Readmitted;
      slot.forgotten = false;
      slot.building = empty_fragment(r.observer_id);
      std::fill(slot.ended.begin(), slot.ended.end(), 0);
      slot.next_step = r.step;  // this step starts its new trajectory
    } else if (r.restart && r.step + 1 == slot.next_step) {
      kind = Kind::Resend;
    }
  }
  if (kind == Kind::Resend) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.resent;
    }
    if (take_over(r.observer_id, resume)) return Admit::Wait;
    std::lock_guard<std::mutex> lock(slot.mu);
    slot.acted = false;  // acted on again: the answer replaces the lost one
    return Admit::Go;
  }
  if (kind == Kind::Readmitted) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.readmitted;
  }
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    rl::Fragment& f = slot.building;
    if (r.step > 0 && kind == Kind::Step) {  // complete the previous step
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
      bool every_env_ended = o_.cut == TrajectoryOptions::Cut::Episodes;
      for (std::size_t e = 0; e < slot.ended.size(); ++e) {
        slot.ended[e] |= r.terminated[e] | r.truncated[e];
        every_env_ended = every_env_ended && slot.ended[e];
      }
      if (f.steps == o_.rollout || every_env_ended) {
        f.next_obs = r.obs;
        done = std::move(f);
        f = empty_fragment(r.observer_id);
        std::fill(slot.ended.begin(), slot.ended.end(), 0);
        finished = true;
      }
    }
    slot.pending_obs = r.obs;
    slot.acted = false;
    ++slot.next_step;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (r.step > 0 && kind == Kind::Step) stats_.steps += o_.envs;
  }
  // Taken back while its step before the drop still waits (held or parked): this one waits in its place.
  if (kind == Kind::Readmitted && take_over(r.observer_id, resume)) return Admit::Wait;
  if (!admit(r.observer_id, finished ? std::optional<rl::Fragment>(std::move(done)) : std::nullopt, resume))
    return Admit::Wait;
  return Admit::Go;
}

void Trajectories::acted(int observer, const rl::ActReply& reply) {
  Slot& slot = *slots_.at(static_cast<std::size_t>(observer));
  std::lock_guard<std::mutex> lock(slot.mu);
  slot.pending = reply;
  slot.acted = true;
}

bool Trajectories::admit(int observer, std::optional<rl::Fragment> f, std::function<void()>& resume) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    if (f) stats_.discarded += static_cast<long long>(f->transitions());
    return true;  // the step is acted on; the observer's next one hears stop
  }
  if (o_.lockstep) {  // one trajectory per observer per round: its next step waits for release()
    if (!f) return true;
    queue_.push_back(std::move(*f));
    ++stats_.queued;
    ready_.notify_one();
    held_.push_back({observer, std::nullopt, std::move(resume), std::chrono::steady_clock::now()});
    return false;
  }
  if (parked_.empty() && (!f || queue_.size() < static_cast<std::size_t>(o_.queue))) {
    if (f) {
      queue_.push_back(std::move(*f));
      ++stats_.queued;
      ready_.notify_one();
    }
    return true;
  }
  parked_.push_back({observer, std::move(f), std::move(resume), std::chrono::steady_clock::now()});
  return false;
}

bool Trajectories::take_over(int observer, std::function<void()>& resume) {
  std::lock_guard<std::mutex> lock(mu_);
  // Swapped, not overwritten: the displaced resume (its call is gone) goes with the caller's
  // argument, outside this lock.
  for (auto& p : held_)
    if (p.observer == observer) {
      std::swap(p.resume, resume);
      return true;
    }
  for (auto& p : parked_)
    if (p.observer == observer) {
      std::swap(p.resume, resume);
      return true;
    }
  return false;
}

void Trajectories::release() {
  std::vector<Parked> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    held.swap(held_);
    // What the round did not take (an observer dropped, or taken back, while it played) was
    // acted with the weights before this round's update: a synchronous learner never learns it.
    for (const auto& f : queue_) stats_.discarded += static_cast<long long>(f.transitions());
    queue_.clear();
  }
  for (auto& p : held)
    if (p.resume) p.resume();
}

bool Trajectories::live(int observer) const {
  Slot& slot = *slots_.at(static_cast<std::size_t>(observer));
  std::lock_guard<std::mutex> lock(slot.mu);
  return !slot.forgotten;
}

std::vector<rl::Fragment> Trajectories::pop(int n, std::chrono::milliseconds timeout) {
  std::vector<rl::Fragment> out;
  std::vector<std::function<void()>> resumed;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const std::size_t want = std::min<std::size_t>(static_cast<std::size_t>(n), static_cast<std::size_t>(o_.queue));
    ready_.wait_for(lock, timeout, [&] { return closed_ || queue_.size() >= want; });
    while (!queue_.empty() && static_cast<int>(out.size()) < n) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    const auto now = std::chrono::steady_clock::now();
    while (!parked_.empty()) {  // in order: a parked trajectory moves in when there is room, a bare step goes on
      Parked& p = parked_.front();
      if (p.trajectory) {
        if (queue_.size() >= static_cast<std::size_t>(o_.queue)) break;
        queue_.push_back(std::move(*p.trajectory));
        ++stats_.queued;
      }
      stats_.waited_s += std::chrono::duration<double>(now - p.since).count();
      resumed.push_back(std::move(p.resume));
      parked_.pop_front();
    }
  }
  for (auto& r : resumed)
    if (r) r();  // the parked steps are acted on, their observers answered
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
  std::vector<std::function<void()>> resumed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (const auto& f : queue_) stats_.discarded += static_cast<long long>(f.transitions());
    queue_.clear();
    for (auto& p : parked_) {
      if (p.trajectory) stats_.discarded += static_cast<long long>(p.trajectory->transitions());
      resumed.push_back(std::move(p.resume));
    }
    parked_.clear();
    for (auto& p : held_) resumed.push_back(std::move(p.resume));
    held_.clear();
    ready_.notify_all();
  }
  for (auto& r : resumed)
    if (r) r();
}

TrajectoryStats Trajectories::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace distrl::agent
