#include "agent/rl_agent.h"

#include <cmath>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "agent/async_learner.h"
#include "agent/observer_pool.h"
#include "agent/round_log.h"
#include "agent/trajectories.h"
#include "agent/run_checkpoint.h"
#include "common/run_dir.h"
#include "common/cpu_time.h"
#include "common/error.h"
#include "common/log.h"
#include "common/quantiles.h"
#include "common/stop_signal.h"
#include "envs/env.h"
#include "envs/render.h"
#include "models/checkpoint.h"
#include "models/torch_threads.h"

namespace distrl::agent {
namespace {

rl::ActReply stop_reply() {
  rl::ActReply r;
  r.stop = true;
  return r;
}

// An observer's step through the trajectories: `act` answers it now (Go), once it may go on
// (Wait: its trajectory waited for room in the queue, or a synchronous round's end; `act` then
// runs on the learner's thread), or the reply says stop (the run is over). A waiting observer
// has no request in the batch: the batcher (may be null) does not wait for it meanwhile.
template <typename Act>
transport::Future<rl::ActReply> admit(Trajectories& intake, Batcher* batcher,
                                      const std::shared_ptr<rl::StepReport>& step, Act act) {
  struct Hold {  // the resume may run before observe() has returned Wait
    std::mutex mu;
    bool waiting = false, resumed = false;
  };
  auto hold = std::make_shared<Hold>();
  const int id = step->observer_id;
  transport::Promise<rl::ActReply> later;
  auto resume = [later, act, hold, batcher, id]() mutable {
    {
      std::lock_guard<std::mutex> lock(hold->mu);
      hold->resumed = true;
      if (hold->waiting && batcher) batcher->set_waiting(id, false);
    }
    try {
      act().then([later](const transport::Future<rl::ActReply>& f) {
        if (f.error()) later.set_error(f.error());
        else later.set_value(f.value());
      });
    } catch (...) {
      later.set_error(std::current_exception());
    }
  };
  switch (intake.observe(*step, resume)) {
    case Trajectories::Admit::Stop: return transport::Future<rl::ActReply>::ready(stop_reply());
    case Trajectories::Admit::Wait: {
      std::lock_guard<std::mutex> lock(hold->mu);
      if (!hold->resumed && batcher) {
        hold->waiting = true;
        batcher->set_waiting(id, true);
      }
      return later.get_future();
    }
    case Trajectories::Admit::Go: break;
  }
  return act();
}

}  // namespace

RlAgent::RlAgent(rl::RlConfig config, const std::string& resume, Load load) : cfg_(std::move(config)) {
  auto env = envs::make_env(cfg_.env);
  const auto space = env->action_space();
  obs_dim_ = env->observation_space().dim();
  act_dim_ = space.kind == envs::Space::Kind::Box ? space.dim() : 0;
  models::set_torch_threads(cfg_.torch_threads);
  algo_ = make_algorithm(cfg_, obs_dim_, space.kind == envs::Space::Kind::Discrete ? space.n : 0, act_dim_);
  if (resume.empty()) return;
  if (load == Load::Resume) models::check_resume_from(cfg_.out_dir, resume);  // this run's, of this workload
  progress_ = load_run(*algo_.learner, resume, cfg_);
  if (load == Load::Evaluate) return;
  if (progress_.rounds >= cfg_.rounds)  // it ran on and rewrote summary.csv with nothing in it
    throw ConfigError("--resume " + resume + ": the checkpoint is at round " + std::to_string(progress_.rounds) +
                      " and learner.rounds is " + std::to_string(cfg_.rounds) +
                      ": nothing is left to run; raise it "
                      "(e.g. learner.rounds=" +
                      std::to_string(progress_.rounds + cfg_.rounds) + ")");
  std::ostringstream line;  // progress output, shown at every log level like the round lines
  line << "agent: resumed from " << resume << " at round " << progress_.rounds << " (" << progress_.episodes
       << " episodes, " << progress_.env_steps << " env steps, running reward " << progress_.running_reward
       << algo_.learner->resume_note() << ")";
  std::printf("%s\n", line.str().c_str());
  std::fflush(stdout);
}

RlAgent::~RlAgent() {
  if (batcher_) batcher_->stop();
}

std::string RlAgent::checkpoint_path() const { return cfg_.out_dir + "/policy.pt"; }

void RlAgent::save(const std::string& path) {
  save_run(*algo_.learner, progress_, path);
  DISTRL_LOG(Info, "agent: saved " << path);
}

void RlAgent::serve(transport::RpcAgent& rpc) {
  // This agent's share of the world's observers (roles.agents; rl/protocol.h).
  const int observers = observers_ =
      rl::observers_of_agent(rpc.rank(), rpc.world_size() - cfg_.agents - cfg_.learners, cfg_.agents);
  if (observers < 1)
    throw ConfigError("the world has no observers for " + rpc.name() + ": start distrl-agent with world size >= " +
                      std::to_string(cfg_.agents + 1 + cfg_.learners) + " (roles.agents + observers + roles.learners)");
  // roles.learners 1: batches go to distrl-learner, the world's last rank (make_algorithm
  // refused a synchronous algo); run() checks it is there once the world is known.
  if (cfg_.learners > 0) static_cast<AsyncLearner&>(*algo_.learner).use_remote(rpc);
  if (const int said = rl::observers_of_agent(rpc.rank(), cfg_.observers, cfg_.agents); observers != said)
    DISTRL_LOG(Info, "agent: " << observers << " observer(s) in the world for " << rpc.name() << " (config 'observers' "
                               << "says " << said << (cfg_.agents > 1 ? " of its" : "") << "; the world wins)");
  Actor* actor = algo_.actor.get();
  const auto where = cfg_.serve_inline ? transport::RunOn::IoThread : transport::RunOn::Pool;
  algo_.learner->set_observers(observers);
  Trajectories* intake = &algo_.learner->trajectories();
  if (cfg_.mode == "batched") {
    BatchOptions bo;
    bo.max_batch = cfg_.max_batch;
    bo.max_wait = std::chrono::microseconds(cfg_.max_wait_us);
    bo.max_request_rows = cfg_.envs_per_observer;
    if (cfg_.batch_close == "read") {
      if (!cfg_.serve_inline)
        throw ConfigError(
            "agent.batch_close: read needs agent.serve_inline: true (the batch closes when the I/O "
            "thread has read every request, so the requests must be served there)");
      bo.close = BatchOptions::Close::WhenRead;
    }
    batcher_ = std::make_unique<Batcher>(obs_dim_, observers, bo,
                                         [actor](const float* obs, int rows) { return actor->act(obs, rows); });
    Batcher* b = batcher_.get();
    // An observer's step: its outcome into the trajectories, its observations into the batch.
    rpc.register_function(
        rl::kAct,
        [b, intake](rl::StepReport report) {
          auto step = std::make_shared<rl::StepReport>(std::move(report));
          return admit(*intake, b, step, [b, intake, step] {
            const int id = step->observer_id;
            return b->submit(id, std::move(step->obs)).then([intake, id](const transport::Future<rl::ActReply>& f) {
              intake->acted(id, f.value());
              return f.value();
            });
          });
        },
        where);
    if (bo.close == BatchOptions::Close::WhenRead) rpc.after_requests_read([b] { b->flush(); });
  } else {
    const int dim = obs_dim_;
    auto times = unbatched_;  // handlers may run on several pool threads: atomic sums
    rpc.register_function(
        rl::kAct,
        [actor, dim, intake, times](rl::StepReport report) {
          auto step = std::make_shared<rl::StepReport>(std::move(report));
          return admit(*intake, nullptr, step, [actor, dim, intake, step, times] {
            // obs was checked whole (Trajectories::observe): rows = the observer's envs
            const int rows = static_cast<int>(step->obs.size()) / dim;
            const auto t0 = std::chrono::steady_clock::now();
            rl::ActReply reply = actor->act(step->obs.data(), rows);
            const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
            times->requests.fetch_add(1, std::memory_order_relaxed);
            times->rows.fetch_add(static_cast<std::uint64_t>(rows), std::memory_order_relaxed);
            times->forward_ns.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
            intake->acted(step->observer_id, reply);
            return transport::Future<rl::ActReply>::ready(std::move(reply));
          });
        },
        where);
  }
}

namespace {

// However RlAgent::run ends (a failed write throws out of it too), the observers are told to
// stop and to finish before the pool releases them: an observer whose loop still ran when its
// Observer went would wait out rpc.timeout_s for a reply.
struct EndStreams {
  Learner& learner;
  ObserverPool& pool;
  bool done = false;
  void operator()(bool ended) {
    if (done) return;
    done = true;
    learner.stop_acting(ended);  // the observers leave their loops at their next request
    pool.finish();
  }
  ~EndStreams() {  // an exception ends the run: a failure
    try {
      (*this)(false);
    } catch (...) {}
  }
};

}  // namespace

RunSummary RlAgent::run(transport::RpcAgent& rpc, run::RunOutputs& out) {
  Learner& learner = *algo_.learner;
  if (cfg_.learners > 0 && rpc.workers().back().name != rl::kLearnerName)
    throw ConfigError(std::string("roles.learners is 1, but the world's last rank is ") + rpc.workers().back().name +
                      ", not distrl-learner (" + rl::kLearnerName + "): start the world with distrl-launch --config");
  ObserverPool pool(rpc, cfg_, batcher_.get());
  EndStreams end_streams{learner, pool};  // however run() ends
  RoundLog log(out, cfg_.log_interval, progress_, cfg_.asynchronous());
  RunSummary sum;
  QuantileSketch latencies;  // fixed memory however long the run (every sample kept grew 18 MB in 10 min)
  double latency_sum = 0;
  double observer_cpu = 0;
  const double process_cpu0 = process_cpu_us(), main_cpu0 = thread_cpu_us();
  const auto start = std::chrono::steady_clock::now();
  const double seconds_before = progress_.seconds;  // earlier runs of a resumed one
  const auto seconds_now = [&] {
    return seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  bool ended_elsewhere = false;  // roles.agents > 1: another agent's run ended first
  for (int round = progress_.rounds + 1; round <= cfg_.rounds; ++round) {
    RoundData d;
    try {
      d = learner.round(pool, cfg_.learn);
    } catch (const TransportError& e) {  // every observer is gone: keep what the finished rounds learned
      sum.failure = e.what();
      break;
    }
    sum.dropped_stale = d.dropped;
    latencies.add(d.latency_us.begin(), d.latency_us.end());
    latency_sum += std::accumulate(d.latency_us.begin(), d.latency_us.end(), 0.0);
    observer_cpu += d.observer_cpu_us;
    progress_.rounds = round;
    progress_.episodes += static_cast<long long>(d.returns.size());
    progress_.env_steps += d.env_steps;
    progress_.running_reward = learner.running_reward(d.returns, progress_.running_reward);
    progress_.seconds = seconds_now();
    if (!d.returns.empty())
      sum.last_reward =
          std::accumulate(d.returns.begin(), d.returns.end(), 0.0) / static_cast<double>(d.returns.size());
    const bool solved = cfg_.learn && learner.solved(progress_.running_reward, cfg_.target_reward);
    const BatchStats bs = batcher_ ? batcher_->stats() : BatchStats{};
    log.round(progress_, d, batcher_ ? &bs : nullptr, solved || round == cfg_.rounds);
    if (cfg_.learn &&
        ((cfg_.checkpoint_every > 0 && round % cfg_.checkpoint_every == 0) || checkpoint_requested_.exchange(false)))
      save(checkpoint_path());
    if (solved) {
      sum.solved = true;
      break;
    }
    if (d.ended_elsewhere) {
      ended_elsewhere = true;
      break;
    }
    if (stop_signal()) break;  // SIGINT/SIGTERM: this round is done; save and report below
  }
  progress_.seconds = seconds_now();
  if (latencies.count() > 0) {
    const double serving_cpu = (process_cpu_us() - process_cpu0) - (thread_cpu_us() - main_cpu0);
    sum.agent_cpu_us_per_request = serving_cpu / static_cast<double>(latencies.count());
    sum.observer_cpu_us_per_request = observer_cpu / static_cast<double>(latencies.count());
  }
  sum.rounds = progress_.rounds;
  sum.episodes = progress_.episodes;
  sum.env_steps = progress_.env_steps;
  sum.seconds = progress_.seconds;
  sum.running_reward = progress_.running_reward;
  sum.observers_lost = pool.lost();
  sum.learner = learner.times();
  if (cfg_.asynchronous()) {
    const TrajectoryStats ts = learner.trajectories().stats();
    sum.asynchronous = true;
    sum.trajectories = ts.queued;
    sum.refused = ts.refused;
    sum.backpressure_s = ts.waited_s;
  }
  sum.observers_readmitted = pool.readmitted();
  summarise_serving(sum, latencies, latency_sum);
  sum.stop_reason = stop_reason(sum, ended_elsewhere);

  end_streams(sum.failure.empty());
  if (cfg_.learn) save(checkpoint_path());
  return sum;
}

void RlAgent::summarise_serving(RunSummary& sum, const QuantileSketch& latencies, double latency_sum) const {
  sum.mean_batch = batcher_ ? batcher_->stats().mean_rows() : 1.0;
  sum.latency_median_us = latencies.quantile(0.5);
  sum.latency_p99_us = latencies.quantile(0.99);
  // Where the mean round trip goes (the rest of it is transport and reply).
  if (latencies.count() > 0) sum.latency_mean_us = latency_sum / static_cast<double>(latencies.count());
  if (batcher_) {
    const BatchStats bs = batcher_->stats();
    if (bs.requests > 0) {
      sum.queue_wait_us = bs.queue_us / static_cast<double>(bs.requests);
      sum.forward_us = bs.forward_wait_us / static_cast<double>(bs.requests);
    }
    if (bs.rows > 0) sum.forward_us_per_row = bs.forward_us / static_cast<double>(bs.rows);
  } else {
    const double requests = static_cast<double>(unbatched_->requests.load()), rows = unbatched_->rows.load(),
                 forward_us = unbatched_->forward_ns.load() / 1000.0;
    if (requests > 0) sum.forward_us = forward_us / requests;
    if (rows > 0) sum.forward_us_per_row = forward_us / rows;
  }
}

std::string RlAgent::stop_reason(const RunSummary& sum, bool ended_elsewhere) const {
  std::ostringstream why;
  why << std::fixed << std::setprecision(1);
  if (!sum.failure.empty())
    why << "every observer was lost during round " << progress_.rounds + 1
        << (cfg_.learn ? "; the checkpoint holds round " + std::to_string(progress_.rounds) +
                             " (go on once the observers can reach the agent: " +
                             resume_command(cfg_.out_dir, checkpoint_path()) + ")"
                       : std::string());
  else if (sum.solved) why << "running reward " << sum.running_reward << " >= " << cfg_.target_reward;
  else if (ended_elsewhere)
    why << "another agent's run ended (the learner process said stop) after round " << progress_.rounds
        << "; running reward here " << sum.running_reward;
  else if (stop_signal() && progress_.rounds < cfg_.rounds)
    why << "stopped by " << stop_signal_name() << " after round " << progress_.rounds << " of " << cfg_.rounds
        << (cfg_.learn ? "; go on with: " + resume_command(cfg_.out_dir, checkpoint_path()) : std::string());
  else if (cfg_.learn)
    why << "ran all " << cfg_.rounds << " rounds; running reward " << sum.running_reward << " < target "
        << cfg_.target_reward << " (raise learner.rounds or tune learner.lr)";
  else why << "ran all " << cfg_.rounds << " rounds (learner.learn is off)";
  return why.str();
}

std::vector<double> RlAgent::evaluate(int episodes, std::uint64_t seed, const std::string& gif_path) {
  auto env = envs::make_env(cfg_.env);
  std::vector<float> obs(obs_dim_);
  std::vector<double> returns;
  std::unique_ptr<envs::GifWriter> gif;
  envs::Frame frame;
  for (int ep = 0; ep < episodes; ++ep) {
    env->reset(seed + static_cast<std::uint64_t>(ep), obs.data());
    if (ep == 0 && !gif_path.empty()) {
      envs::draw(*env, &frame);
      gif = std::make_unique<envs::GifWriter>(gif_path, frame.width, frame.height, 4);
      gif->add(frame);
    }
    double ret = 0;
    for (int t = 0; t < cfg_.max_steps; ++t) {
      const rl::ActReply a = algo_.actor->act_eval(obs.data(), 1);
      const envs::Step s =
          act_dim_ > 0 ? env->step(a.cont_actions.data(), obs.data()) : env->step(a.actions[0], obs.data());
      ret += s.reward;
      if (gif && (t % 2 == 1 || s.done())) {  // 25 frames per second of game time
        envs::draw(*env, &frame);
        gif->add(frame);
      }
      if (s.done()) break;
    }
    if (gif) {
      gif->close();
      gif.reset();
    }
    returns.push_back(ret);
  }
  return returns;
}

}  // namespace distrl::agent
