// SIGINT/SIGTERM in lock-step training (DDP, the pipeline's stages): every rank must stop after
// the same step, or the others wait in a collective for a rank that left. The ranks agree with
// one 8-byte all_reduce (max of "a signal arrived here"), called at the same step on every rank
// (every kStopCheckSteps steps: cheap next to a step's own collectives).
// Ranks that run at their own pace (the parameter-server trainers) share a stop through the
// run's store instead: StopFlag. Call install_stop_handlers() (common/stop_signal.h) before
// the loop. A workload's loop uses both through training/run_loop.h.
#pragma once

#include <chrono>
#include <string>

namespace distrl::transport {
class ProcessGroup;
class Store;
}  // namespace distrl::transport

namespace distrl::training {

constexpr long long kStopCheckSteps = 10;

// True on every rank when any rank got SIGINT/SIGTERM. A collective: all ranks of pg call it
// at the same point. pg null or of size 1: this process's own stop_signal().
bool stop_agreed(transport::ProcessGroup* pg);

// A stop shared through the store, for ranks not in lock-step: a rank that got SIGINT/SIGTERM
// publishes it (key "run/stop", holding the signal's name) when it first asks; every rank
// sees its own signal at once and another rank's within kPollInterval of asking. Asking is
// cheap between steps (a store round trip at most every kPollInterval). The store must outlive
// the flag. Thread-safety: one thread per flag.
class StopFlag {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{200};
  explicit StopFlag(transport::Store& store);
  // True once this process or any other of the run asked to stop. Store errors count as "no
  // stop yet" (a store that is gone fails the next real call, with its own words).
  bool requested();
  // Who asked: "SIGINT", "SIGTERM on another rank", or "" before requested() was true.
  const std::string& by() const { return by_; }

 private:
  transport::Store& store_;
  bool stop_ = false;
  std::string by_;
  std::chrono::steady_clock::time_point next_poll_{};
};

}  // namespace distrl::training
