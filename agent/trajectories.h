// Every learner's intake: trajectories assembled from the observers' steps, and the bounded
// queue between acting and learning.
//
// An observer sends one StepReport per step (rl/protocol.h): the observations to act on, and
// what its previous actions did. observe() completes that previous step of each of its envs
// (reward, termination, truncation and the final observation of a truncated episode) and, when
// a trajectory is complete, closes it (the new observations are its next_obs) and queues it;
// acted() records the actions, log-probabilities, values and policy version the agent's
// forward chose for the pending observations. A trajectory is an rl::Fragment (time-major
// [steps, envs]) with next_obs, final_obs and versions filled. It is complete at `rollout`
// steps (Cut::Steps: PPO, APPO, IMPALA) or once every env has ended an episode in it
// (Cut::Episodes: REINFORCE; `rollout` then caps it).
//
// Lockstep (the synchronous learners): an observer's step that completes its trajectory is held
// (observe() returns Wait) until release(): each observer plays up to the round's end and waits
// there, the others go on until theirs, and the learner learns from one trajectory per observer
// with acting paused, then releases them to act with the new weights.
//
// A dropped observer (forget()) is taken back at its next step: its envs did not wait for the
// agent's verdict, so that step starts a new trajectory. A resend (StepReport::restart) of a step
// already taken is acted on again rather than counted twice.
//
// Back-pressure: a step whose trajectory finds the queue full is parked, not blocked: observe()
// returns Wait at once (no serving thread waits) and the trajectory waits in line; while one
// does, every other observer's step is parked behind it too, so acting pauses until the learner
// takes a batch (as a blocked queue would, without holding a thread). The learner's pop() then
// queues what fits and resumes the parked steps in order, on the popping thread, so their
// observers' replies, and with them the observers, waited for the learner. The observers' own
// RPC timeout bounds that wait. Bad reports are refused with a ProtocolError naming the observer
// and counted (the observer's request fails; what it sent is not used).
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
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "rl/protocol.h"

namespace distrl::agent {

struct TrajectoryOptions {
  enum class Cut { Steps, Episodes };
  int observers = 1, envs = 1, obs_dim = 1, act_dim = 0;  // act_dim 0: discrete actions
  int rollout = 32;                                       // steps per trajectory (Cut::Episodes: at most)
  int queue = 32;
  Cut cut = Cut::Steps;
  bool lockstep = false;
};

struct TrajectoryStats {
  long long steps = 0;       // env steps completed (their outcome arrived)
  long long queued = 0;      // trajectories queued
  long long refused = 0;     // malformed reports refused
  long long discarded = 0;   // steps of lost observers' unfinished trajectories, and left at the end
  long long readmitted = 0;  // dropped observers whose steps came again
  long long resent = 0;      // resends of a step already taken (its answer was lost)
  double waited_s = 0;       // parked trajectories' total wait for room in the queue (back-pressure)
};

class Trajectories {
 public:
  explicit Trajectories(TrajectoryOptions options);
  ~Trajectories();
  // The run's observer count (and the queue's size when given), once the world is known; before
  // any observe(). Not thread-safe.
  void set_observers(int observers, int queue = 0);

  // One observer's step (see above). Go: act on it now. Wait: its finished trajectory is parked
  // until there is room; `resume` then runs (once, on the thread of the pop() or close() that
  // queued or discarded it): act on the step there. Stop: closed, the run is over: tell the
  // observer to stop.
  enum class Admit { Go, Wait, Stop };
  Admit observe(const rl::StepReport& report, std::function<void()> resume = {});
  // The answer to that observer's pending observations.
  void acted(int observer, const rl::ActReply& reply);
  // Waits until `n` trajectories are queued (or as many as the queue holds, or closed, or
  // `timeout` has passed) and takes up to n of them, oldest first; parked ones then move in.
  std::vector<rl::Fragment> pop(int n, std::chrono::milliseconds timeout);
  // Lockstep: the held steps are acted on (each on the calling thread), so their observers go
  // on; a trajectory the round did not take is discarded (counted): it is a round old.
  void release();
  // A lost observer: its unfinished trajectory is discarded (counted); a report from it later
  // takes it back (counted in readmitted) and starts a new trajectory.
  void forget(int observer);
  // Not forgotten (never, or taken back since).
  bool live(int observer) const;
  // observe() returns Stop from now on; queued and parked trajectories are discarded (counted) and
  // the parked steps resumed. Idempotent.
  void close();
  TrajectoryStats stats() const;
  const TrajectoryOptions& options() const { return o_; }

 private:
  struct Slot;
  void check(const rl::StepReport& r, const Slot& slot) const;  // throws ProtocolError
  // Queues f (when given), or parks the step with `resume` and f behind the ones waiting
  // (false); lockstep: queues f and holds the step (false). f is discarded when closed.
  bool admit(int observer, std::optional<rl::Fragment> f, std::function<void()>& resume);
  // A resend of the observer's step whose step is still parked or held: its resume (which would
  // answer the lost call) becomes this one's. False when none is waiting.
  bool take_over(int observer, std::function<void()>& resume);
  struct Parked {
    int observer = 0;
    std::optional<rl::Fragment> trajectory;  // none: a step that finished no trajectory
    std::function<void()> resume;
    std::chrono::steady_clock::time_point since;
  };
  rl::Fragment empty_fragment(int observer) const;

  TrajectoryOptions o_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;  // the queue, closed_, the counters
  std::condition_variable ready_;
  std::deque<rl::Fragment> queue_;
  std::deque<Parked> parked_;
  std::vector<Parked> held_;  // lockstep: until release()
  bool closed_ = false;
  TrajectoryStats stats_;
};

}  // namespace distrl::agent
