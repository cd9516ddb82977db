// The asynchronous learners' intake: trajectories assembled from streaming observers' steps,
// and the bounded queue between acting and learning.
//
// A streaming observer sends one StepReport per step (rl/protocol.h): the observations to act
// on, and what its previous actions did. observe() completes that previous step of each of its
// envs (reward, termination, truncation and the final observation of a truncated episode) and,
// when a trajectory holds `rollout` steps, closes it (the new observations are its next_obs)
// and queues it; acted() records the actions, log-probabilities and policy version the agent's
// forward chose for the pending observations. A trajectory is an rl::Fragment (time-major
// [rollout, envs]) with next_obs, final_obs and versions filled.
//
// Back-pressure: a full queue makes observe() wait (the observer's reply waits with it) until
// the learner takes a batch, at most `push_timeout`; a trajectory that still finds no room is
// dropped and counted (never silently). Bad reports are refused with a ProtocolError naming the
// observer and counted (the observer's request fails; what it sent is not used).
//
// Thread-safety: observe() and acted() run on the agent's serving threads (the RPC I/O thread,
// pool threads, the batcher's closing thread), concurrently for different observers; one
// observer's calls alternate (its next request follows the reply to its previous). pop(),
// forget(), close() and stats() may be called from any thread (the learner's).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "rl/protocol.h"

namespace distrl::agent {

struct TrajectoryOptions {
  int observers = 1, envs = 1, obs_dim = 1, act_dim = 0;  // act_dim 0: discrete actions
  int rollout = 32;
  int queue = 32;
  std::chrono::milliseconds push_timeout{60000};
};

struct TrajectoryStats {
  long long steps = 0;          // env steps completed (their outcome arrived)
  long long queued = 0;         // trajectories queued
  long long dropped_full = 0;   // dropped: the queue stayed full for push_timeout
  long long refused = 0;        // malformed reports refused
  long long discarded = 0;      // steps of lost observers' unfinished trajectories, and left at the end
  double waited_s = 0;          // acting's total wait for room in the queue (back-pressure)
};

class Trajectories {
 public:
  explicit Trajectories(TrajectoryOptions options);
  ~Trajectories();
  // The run's observer count, once the world is known; before any observe(). Not thread-safe.
  void set_observers(int observers);

  // One observer's step (see above). Returns false once closed: the run is over, tell it to stop.
  bool observe(const rl::StepReport& report);
  // The answer to that observer's pending observations.
  void acted(int observer, const rl::ActReply& reply);
  // Waits until `n` trajectories are queued (or closed, or `timeout` has passed) and takes up to
  // n of them, oldest first.
  std::vector<rl::Fragment> pop(int n, std::chrono::milliseconds timeout);
  // A lost observer: its unfinished trajectory is discarded (counted); a report from it later is refused.
  void forget(int observer);
  // observe() returns false from now on; a waiting one gives up. Idempotent.
  void close();
  TrajectoryStats stats() const;
  const TrajectoryOptions& options() const { return o_; }

 private:
  struct Slot;
  void check(const rl::StepReport& r, const Slot& slot) const;  // throws ProtocolError
  void push(rl::Fragment&& f);
  rl::Fragment empty_fragment(int observer) const;

  TrajectoryOptions o_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;  // the queue, closed_, the counters
  std::condition_variable room_, ready_;
  std::deque<rl::Fragment> queue_;
  bool closed_ = false;
  TrajectoryStats stats_;
};

}  // namespace distrl::agent
