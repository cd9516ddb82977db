// The agent process's RL loop, the C++ form of PyTorch's batched-RPC REINFORCE tutorial with
// the control turned the right way round: the agent creates one Observer object per observer
// process (remote) and starts its loop once; each observer then steps its envs and sends every
// step's outcome with its next act request, which the agent answers (batched or not) and turns
// into trajectories. Each round learns from them: the synchronous algorithms (REINFORCE, PPO)
// from one trajectory per observer while the observers wait at the round's end, APPO / IMPALA
// while they act on. The algorithm sits behind learner.h (Actor + Learner); this file is the
// round loop around it (observer_pool.h, round_log.h, run_checkpoint.h).
//
//   RlAgent rl(config);
//   RpcAgent rpc(options, [&](RpcAgent& a) { rl.serve(a); });   // act is registered
//   run::RunOutputs out(cfg.out_dir, true, cfg.tensorboard);      // claims run.out_dir
//   RunSummary s = rl.run(rpc, out);                             // trains until solved or done
//   rpc.shutdown();
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "agent/batcher.h"
#include "agent/learner.h"
#include "common/quantiles.h"
#include "rl/rl_config.h"
#include "run/run_outputs.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::agent {

struct RunSummary {
  bool solved = false;
  std::string stop_reason;
  int rounds = 0;
  long long episodes = 0;
  long long env_steps = 0;
  double seconds = 0;  // the rounds only (not start-up)
  double running_reward = 0;
  double last_reward = 0;
  double mean_batch = 0;                             // rows per forward pass
  double latency_median_us = 0, latency_p99_us = 0;  // observers' act round trips
  // The mean round trip and the agent's share of it, per request: waiting for the batch to close
  // (0 unbatched), the forward pass it waited for; the rest is transport and reply. And a
  // forward's cost per row (a batch's forward over its rows).
  double latency_mean_us = 0, queue_wait_us = 0, forward_us = 0, forward_us_per_row = 0;
  // CPU time per act request during the rounds: the agent's serving threads (the
  // process's CPU minus the round loop's own thread, which starts episodes and learns) and the
  // observers' processes (stepping envs included).
  double agent_cpu_us_per_request = 0, observer_cpu_us_per_request = 0;
  int observers_lost = 0;        // dropped and not back at the end
  int observers_readmitted = 0;  // times a dropped observer's connection came back
  // Not empty when the run could not go on (every observer lost: crashed, or the network to
  // them failed); the rounds finished before it were still saved and reported.
  std::string failure;
  LearnerTimes learner;  // where the updates' time went
  // Asynchronous learners: trajectories queued, dropped as older than async.max_lag, malformed
  // steps refused, and how long trajectories waited for room in the queue (back-pressure).
  bool asynchronous = false;
  long long trajectories = 0, dropped_stale = 0, refused = 0;
  double backpressure_s = 0;
  double steps_per_second() const { return seconds > 0 ? env_steps / seconds : 0; }
};

class RlAgent {
 public:
  // What a checkpoint given to the constructor is for: a run that goes on (--resume: it must
  // have rounds left, and says where it resumes) or an evaluation (--eval: weights only).
  enum class Load { Resume, Evaluate };
  // Builds the algorithm (learner.algo) and loads `checkpoint` when not empty. Throws
  // ConfigError for bad values, a checkpoint of another algorithm or shape, and (Resume) one
  // already at learner.rounds ("raise it"), before anything is written.
  explicit RlAgent(rl::RlConfig config, const std::string& checkpoint = "", Load load = Load::Resume);
  ~RlAgent();

  // In the RpcAgent's setup callback: registers act (batched or not) for the
  // world's observers (every rank but this one).
  void serve(transport::RpcAgent& rpc);
  // The observers this agent serves (its share of the world's), known once serve() has run.
  int observers() const { return observers_; }
  // Runs rounds until solved, round learner.rounds (a resumed run counts on from its checkpoint),
  // a stop signal, or every observer is lost (then `failure` says why and the round in flight
  // is dropped); then tells the observers to finish and saves the checkpoint of the last
  // finished round. Prints progress; writes metrics.csv and its TensorBoard rows through `out`
  // (a resumed run appends to them).
  RunSummary run(transport::RpcAgent& rpc, run::RunOutputs& out);

  // Saves policy + optimizer + progress atomically (temp file + rename).
  void save(const std::string& path);
  // Asks for a checkpoint after the current round (async-signal-safe).
  void request_checkpoint() { checkpoint_requested_.store(true); }
  std::string checkpoint_path() const;

  // Plays `episodes` episodes in this process (no observers) with the current policy
  // (Actor::act_eval) and returns their returns. With gif_path, the first episode is also
  // written there as an animated GIF.
  std::vector<double> evaluate(int episodes, std::uint64_t seed, const std::string& gif_path = "");

 private:
  // run()'s summary of the serving side: the round trip's quantiles and mean, where it goes
  // (queue wait, forward) and the mean batch.
  void summarise_serving(RunSummary& sum, const QuantileSketch& latencies, double latency_sum) const;
  // run()'s stop line: why the run ended, and how to go on.
  std::string stop_reason(const RunSummary& sum, bool ended_elsewhere) const;

  rl::RlConfig cfg_;
  int observers_ = 0;  // serve()
  int obs_dim_ = 0, act_dim_ = 0;
  Algorithm algo_;
  std::unique_ptr<Batcher> batcher_;
  struct UnbatchedTimes {  // unbatched serving's forward passes, summed by the handler threads
    std::atomic<std::uint64_t> requests{0}, rows{0}, forward_ns{0};
  };
  std::shared_ptr<UnbatchedTimes> unbatched_ = std::make_shared<UnbatchedTimes>();
  Progress progress_;  // carried across --resume by the checkpoint
  std::atomic<bool> checkpoint_requested_{false};
};

}  // namespace distrl::agent
