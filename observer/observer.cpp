#include "observer/observer.h"

#include <algorithm>
#include <optional>

#include "common/cpu_time.h"
#include "common/error.h"
#include "common/log.h"
#include "common/stop_signal.h"

namespace distrl::observer {

using Clock = std::chrono::steady_clock;

namespace {

// Steps every env of venv with the answer's actions: continuous ones, or discrete ones through
// `discrete` (int per env, reused).
void step_envs(envs::VecEnv& venv, const rl::ActReply& r, int act_dim, std::vector<int>& discrete) {
  if (act_dim > 0) {
    venv.step(r.cont_actions.data());
  } else {
    std::copy(r.actions.begin(), r.actions.end(), discrete.begin());
    venv.step(discrete.data());
  }
}

// After a step of an autoreset venv: adds the rewards to the running episodes of `state`, and for
// each env whose episode ended (the VecEnv restarted it) appends its return and length.
void count_episode_ends(const envs::VecEnv& venv, FragmentState& state, std::vector<float>* returns,
                        std::vector<std::int32_t>* lengths) {
  for (int i = 0; i < venv.size(); ++i) {
    state.episode_return[i] += venv.rewards()[i];
    ++state.episode_length[i];
    if (venv.terminated()[i] || venv.truncated()[i]) {
      returns->push_back(state.episode_return[i]);
      lengths->push_back(state.episode_length[i]);
      state.episode_return[i] = 0;
      state.episode_length[i] = 0;
    }
  }
}

// The first call of a loop over an autoreset venv: every env restarts, no episode counted yet.
void start(envs::VecEnv& venv, FragmentState& state) {
  venv.reset_all();
  state.episode_return.assign(venv.size(), 0.0f);
  state.episode_length.assign(venv.size(), 0);
  state.started = true;
}

}  // namespace

rl::Rollout run_episode(envs::VecEnv& venv, int observer_id, int max_steps, const ActFn& act,
                           bool record_latency) {
  const int n = venv.size();
  const int dim = venv.obs_dim();
  // Per env: its trajectory so far (appended in place, concatenated at the end).
  std::vector<rl::Rollout> per(n);
  std::vector<float> request;
  std::vector<int> actions(n, 0), rows(n, -1);
  rl::Rollout out;
  out.observer_id = observer_id;
  out.obs_dim = dim;
  venv.reset_all();
  for (int t = 0; t < max_steps && venv.num_running() > 0; ++t) {
    request.clear();
    int m = 0;
    for (int i = 0; i < n; ++i) {
      rows[i] = venv.running(i) ? m++ : -1;
      if (rows[i] >= 0) request.insert(request.end(), venv.obs(i), venv.obs(i) + dim);
    }
    const auto t0 = Clock::now();
    rl::ActReply reply = act(request);
    if (record_latency)
      out.latency_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - t0).count());
    if (static_cast<int>(reply.actions.size()) != m || static_cast<int>(reply.log_probs.size()) != m)
      throw ProtocolError("select_action answered " + std::to_string(reply.actions.size()) + " actions for " +
                          std::to_string(m) + " observations");
    for (int i = 0; i < n; ++i) {
      if (rows[i] < 0) continue;
      auto& p = per[i];
      p.obs.insert(p.obs.end(), venv.obs(i), venv.obs(i) + dim);
      p.actions.push_back(reply.actions[rows[i]]);
      p.log_probs.push_back(reply.log_probs[rows[i]]);
      actions[i] = reply.actions[rows[i]];
    }
    venv.step(actions.data());
    for (int i = 0; i < n; ++i) {
      if (rows[i] < 0) continue;
      per[i].rewards.push_back(venv.rewards()[i]);
      if (!venv.running(i)) per[i].terminated.push_back(venv.terminated()[i]);
    }
  }
  for (auto& p : per) {
    out.obs.insert(out.obs.end(), p.obs.begin(), p.obs.end());
    out.actions.insert(out.actions.end(), p.actions.begin(), p.actions.end());
    out.log_probs.insert(out.log_probs.end(), p.log_probs.begin(), p.log_probs.end());
    out.rewards.insert(out.rewards.end(), p.rewards.begin(), p.rewards.end());
    out.lengths.push_back(static_cast<std::int32_t>(p.rewards.size()));
    out.terminated.push_back(p.terminated.empty() ? 0 : p.terminated.front());  // cut by max_steps: not terminated
  }
  return out;
}

rl::Fragment run_fragment(envs::VecEnv& venv, FragmentState& state, int observer_id, int steps, const ActFn& act,
                             bool record_latency) {
  const int n = venv.size(), dim = venv.obs_dim();
  const auto space = venv.env(0).action_space();
  const int act_dim = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
  if (!state.started) start(venv, state);
  rl::Fragment f;
  f.observer_id = observer_id;
  f.obs_dim = dim;
  f.act_dim = act_dim;
  f.num_envs = n;
  f.steps = steps;
  const std::size_t total = static_cast<std::size_t>(steps) * n;
  f.obs.reserve(total * dim);
  std::vector<float> request;
  std::vector<int> discrete(n);
  auto ask = [&]() {
    request.assign(venv.obs(), venv.obs() + static_cast<std::size_t>(n) * dim);
    const auto t0 = Clock::now();
    rl::ActReply r = act(request);
    if (record_latency) f.latency_us.push_back(std::chrono::duration<float, std::micro>(Clock::now() - t0).count());
    r.check(n);
    if (r.values.size() != static_cast<std::size_t>(n) ||
        (act_dim > 0 ? r.cont_actions.size() != static_cast<std::size_t>(n) * act_dim : r.actions.empty()))
      throw ProtocolError("select_action: an actor-critic answer with values and " +
                          std::string(act_dim > 0 ? "continuous" : "discrete") + " actions was expected");
    return r;
  };
  for (int t = 0; t < steps; ++t) {
    rl::ActReply r = ask();
    f.obs.insert(f.obs.end(), request.begin(), request.end());
    f.log_probs.insert(f.log_probs.end(), r.log_probs.begin(), r.log_probs.end());
    f.values.insert(f.values.end(), r.values.begin(), r.values.end());
    if (act_dim > 0) f.cont_actions.insert(f.cont_actions.end(), r.cont_actions.begin(), r.cont_actions.end());
    else f.actions.insert(f.actions.end(), r.actions.begin(), r.actions.end());
    step_envs(venv, r, act_dim, discrete);
    // Episodes cut by the time limit: the critic's value of their final observation, which
    // the restart has replaced in obs() (one extra request, only when that happens).
    std::vector<int> cut;
    for (int i = 0; i < n; ++i)
      if (venv.truncated()[i] && !venv.terminated()[i]) cut.push_back(i);
    std::vector<float> cut_values(n, 0.0f);
    if (!cut.empty()) {
      std::vector<float> finals;
      for (int i : cut) finals.insert(finals.end(), venv.final_obs(i), venv.final_obs(i) + dim);
      rl::ActReply v = act(finals);
      v.check(static_cast<int>(cut.size()));
      if (v.values.size() != cut.size()) throw ProtocolError("select_action: no values for the final observations");
      for (std::size_t k = 0; k < cut.size(); ++k) cut_values[cut[k]] = v.values[k];
    }
    f.rewards.insert(f.rewards.end(), venv.rewards().begin(), venv.rewards().end());
    f.terminated.insert(f.terminated.end(), venv.terminated().begin(), venv.terminated().end());
    f.truncated.insert(f.truncated.end(), venv.truncated().begin(), venv.truncated().end());
    f.truncated_values.insert(f.truncated_values.end(), cut_values.begin(), cut_values.end());
    count_episode_ends(venv, state, &f.episode_returns, &f.episode_lengths);
  }
  f.last_values = ask().values;
  return f;
}

void run_stream(envs::VecEnv& venv, int observer_id, const StepFn& step, const std::atomic<bool>& stop) {
  const int n = venv.size(), dim = venv.obs_dim();
  const auto space = venv.env(0).action_space();
  const int act_dim = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
  FragmentState episodes;
  start(venv, episodes);
  std::vector<int> discrete(n);
  rl::StepReport report;
  report.observer_id = observer_id;
  double cpu0 = process_cpu_us();
  while (!stop.load(std::memory_order_relaxed)) {
    report.obs.assign(venv.obs(), venv.obs() + static_cast<std::size_t>(n) * dim);
    const double cpu = process_cpu_us();
    report.cpu_us = cpu - cpu0;
    cpu0 = cpu;
    const auto t0 = Clock::now();
    rl::ActReply r = step(report);
    report.latency_us = std::chrono::duration<float, std::micro>(Clock::now() - t0).count();
    if (r.stop) return;
    r.check(n);
    if (act_dim > 0 ? r.cont_actions.size() != static_cast<std::size_t>(n) * act_dim : r.actions.empty())
      throw ProtocolError("act: an answer with " + std::string(act_dim > 0 ? "continuous" : "discrete") +
                          " actions was expected");
    step_envs(venv, r, act_dim, discrete);
    ++report.step;
    report.rewards = venv.rewards();
    report.terminated = venv.terminated();
    report.truncated = venv.truncated();
    report.final_obs.clear();
    report.episode_returns.clear();
    report.episode_lengths.clear();
    for (int i = 0; i < n; ++i)
      if (venv.truncated()[i] && !venv.terminated()[i])  // the restart replaced it in obs()
        report.final_obs.insert(report.final_obs.end(), venv.final_obs(i), venv.final_obs(i) + dim);
    count_episode_ends(venv, episodes, &report.episode_returns, &report.episode_lengths);
  }
}

void ObserverHost::touch() {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = Clock::now();
}

void ObserverHost::run_started() {
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
}

bool ObserverHost::started() {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

void ObserverHost::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

void ObserverHost::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = why;
  }
  cv_.notify_all();
}

bool ObserverHost::wait(std::chrono::milliseconds idle_limit, const std::function<std::string()>& agent_lost,
                        std::chrono::milliseconds stop_grace) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<Clock::time_point> leave_at;  // set by a stop signal
  auto lost_since = Clock::time_point::max();  // since when the agent's connection is down (max: it is not)
  for (;;) {
    if (finished_) return true;
    if (!leave_at && stop_signal()) leave_at = Clock::now() + (started_ ? stop_grace : std::chrono::milliseconds(0));
    if (leave_at && Clock::now() >= *leave_at) return false;
    if (!failure_.empty()) throw TransportError(failure_);
    if (agent_lost) {
      if (std::string why = agent_lost(); why.empty()) {
        lost_since = Clock::time_point::max();
      } else {
        const auto now = Clock::now();
        lost_since = std::min(lost_since, now);
        if (now - lost_since >= kAgentLostGrace) throw TransportError("lost the agent: " + why);
      }
    }
    const auto idle = Clock::now() - last_;
    if (idle > idle_limit)
      throw TimeoutError("no request from the agent for " +
                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(idle).count()) +
                         " s (rpc.timeout_s); is it still running?");
    cv_.wait_for(lock, std::chrono::milliseconds(200));
  }
}

Observer::Observer(transport::RpcAgent& rpc, ObserverHost& host, rl::ObserverSpec spec)
    : rpc_(rpc), host_(host), spec_(std::move(spec)),
      venv_(spec_.env, spec_.num_envs, spec_.seed, /*autoreset=*/spec_.fragments || spec_.stream) {
  host_.touch();
  host_.run_started();
  // The log tag names this process ([observer2]); its index in the agent's pool is not repeated.
  DISTRL_LOG(Info, "stepping " << spec_.num_envs << " x " << spec_.env << " for '" << spec_.agent << "'");
}

template <typename Run>
auto Observer::with_agent(Run&& run) {
  std::lock_guard<std::mutex> lock(mu_);
  host_.touch();
  const int id = spec_.observer_id;
  const std::uint64_t drops = rpc_.connection_drops(spec_.agent);
  ActFn act = [this, id](const std::vector<float>& obs) {
    auto r = rpc_.rpc_sync<rl::ActReply>(spec_.agent, rl::kSelectAction, id, obs);
    host_.touch();
    return r;
  };
  try {
    return run(act);
  } catch (const TransportError& e) {
    // A dropped connection may come back (this process was stopped, the network blinked): the
    // host's wait decides whether the agent is gone. Any other failure is final. "Dropped" is
    // counted, not looked at now: the connection may be back already.
    if (!rpc_.connection_lost(spec_.agent) && rpc_.connection_drops(spec_.agent) == drops)
      host_.fail(std::string("lost the agent: ") + e.what());
    throw;
  }
}

rl::Rollout Observer::run_episode(int max_steps) {
  if (spec_.fragments) throw Error("run_episode: this observer runs fragments (PPO); call run_fragment");
  const double cpu0 = process_cpu_us();
  auto r = with_agent([&](const ActFn& act) {
    return observer::run_episode(venv_, spec_.observer_id, max_steps, act, spec_.record_latency);
  });
  r.cpu_us = process_cpu_us() - cpu0;
  return r;
}

rl::Fragment Observer::run_fragment(int steps) {
  if (!spec_.fragments) throw Error("run_fragment: this observer runs whole episodes (REINFORCE)");
  if (steps < 1) throw Error("run_fragment: steps must be positive, got " + std::to_string(steps));
  const double cpu0 = process_cpu_us();
  auto f = with_agent([&](const ActFn& act) {
    return observer::run_fragment(venv_, fragment_state_, spec_.observer_id, steps, act, spec_.record_latency);
  });
  f.cpu_us = process_cpu_us() - cpu0;
  return f;
}

int Observer::run_stream(int) {
  if (!spec_.stream) throw Error("run_stream: this observer was made for run_episode / run_fragment");
  std::lock_guard<std::mutex> lock(mu_);
  if (stream_.joinable()) throw Error("run_stream: this observer's loop is already running");
  host_.touch();
  stream_ = std::thread([this] {
    const std::uint64_t drops = rpc_.connection_drops(spec_.agent);
    try {
      observer::run_stream(venv_, spec_.observer_id, [this](const rl::StepReport& report) {
        auto r = rpc_.rpc_sync<rl::ActReply>(spec_.agent, rl::kAct, report);
        host_.touch();
        return r;
      }, stop_);
    } catch (const TransportError& e) {
      // As with_agent: a dropped connection is the host's to judge (it may come back); but this
      // loop has ended, so a connection that comes back leaves an observer with nothing to do.
      if (!rpc_.connection_lost(spec_.agent) && rpc_.connection_drops(spec_.agent) == drops)
        host_.fail(std::string("lost the agent: ") + e.what());
      else
        host_.fail(std::string("the connection to the agent dropped mid-run: ") + e.what());
    } catch (const std::exception& e) {
      host_.fail(std::string("the agent refused a step: ") + e.what());
    }
  });
  return spec_.num_envs;
}

void Observer::finish() {
  stop_.store(true);
  host_.finish();
}

Observer::~Observer() {
  stop_.store(true);
  if (stream_.joinable()) stream_.join();
}

void Observer::register_class(transport::RpcAgent& rpc, ObserverHost& host) {
  rpc.register_class<Observer>(rl::kObserverClass)
      .factory([&rpc, &host](rl::ObserverSpec spec) { return std::make_shared<Observer>(rpc, host, std::move(spec)); })
      .method(rl::kRunEpisode, &Observer::run_episode)
      .method(rl::kRunFragment, &Observer::run_fragment)
      .method(rl::kRunStream, &Observer::run_stream)
      .method(rl::kFinish, &Observer::finish);
}

}  // namespace distrl::observer
