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

// Episode bookkeeping across the loop's steps (envs restart on their own).
struct EpisodeState {
  std::vector<float> episode_return;
  std::vector<std::int32_t> episode_length;
};

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
void count_episode_ends(const envs::VecEnv& venv, EpisodeState& state, std::vector<float>* returns,
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

// The start of a loop over an autoreset venv: every env restarts, no episode counted yet.
void start(envs::VecEnv& venv, EpisodeState& state) {
  venv.reset_all();
  state.episode_return.assign(venv.size(), 0.0f);
  state.episode_length.assign(venv.size(), 0);
}

}  // namespace

void run_stream(envs::VecEnv& venv, int observer_id, const StepFn& step, const std::atomic<bool>& stop) {
  const int n = venv.size(), dim = venv.obs_dim();
  const auto& space = venv.action_space();
  const int act_dim = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
  EpisodeState episodes;
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
  std::optional<Clock::time_point> leave_at;   // set by a stop signal
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
      venv_(spec_.env, spec_.num_envs, spec_.seed, /*autoreset=*/true, spec_.max_episode_steps) {
  host_.touch();
  host_.run_started();
  // The log tag names this process ([observer2]); its index in the agent's pool is not repeated.
  DISTRL_LOG(Info, "stepping " << spec_.num_envs << " x " << spec_.env << " for '" << spec_.agent << "'");
}

rl::ActReply Observer::step(const rl::StepReport& report) {
  const rl::StepReport* send = &report;
  rl::StepReport again;  // the same step, sent again marked as a resend
  for (;;) {
    const std::uint64_t drops = rpc_.connection_drops(spec_.agent);
    try {
      auto r = rpc_.rpc_sync<rl::ActReply>(spec_.agent, rl::kAct, *send);
      host_.touch();
      return r;
    } catch (const TransportError& e) {
      // Only a dropped connection is worth another try: wait (as the host's wait does) for it
      // to come back, then send the same observations again; the host gives up on the agent
      // after kAgentLostGrace, and stop_ ends the wait.
      if (!rpc_.connection_lost(spec_.agent) && rpc_.connection_drops(spec_.agent) == drops) throw;
      const auto give_up = Clock::now() + ObserverHost::kAgentLostGrace + std::chrono::seconds(1);
      while (rpc_.connection_lost(spec_.agent)) {
        if (stop_.load() || Clock::now() > give_up)
          throw TransportError(std::string("the connection to the agent dropped mid-run and did not come back: ") +
                               e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      DISTRL_LOG(Warn, "the connection to '" << spec_.agent << "' dropped during step " << report.step
                                             << " and is back: sending its observations again (" << e.what() << ")");
      again = report;
      again.restart = true;
      send = &again;
    }
  }
}

int Observer::run_stream(int) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream_.joinable()) throw Error("run_stream: this observer's loop is already running");
  host_.touch();
  stream_ = std::thread([this] {
    const std::uint64_t drops = rpc_.connection_drops(spec_.agent);
    try {
      observer::run_stream(
          venv_, spec_.observer_id, [this](const rl::StepReport& report) { return step(report); }, stop_);
    } catch (const TransportError& e) {
      if (!rpc_.connection_lost(spec_.agent) && rpc_.connection_drops(spec_.agent) == drops)
        host_.fail(std::string("lost the agent: ") + e.what());
      else host_.fail(e.what());
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
      .method(rl::kRunStream, &Observer::run_stream)
      .method(rl::kFinish, &Observer::finish);
}

}  // namespace distrl::observer
