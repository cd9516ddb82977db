// An observer's own loop (observer::run_stream) played in this process, with no RPC: its steps go
// straight into a Trajectories of the learner's shape and its actions come from `actor`. For the
// learner benchmark and the learners' in-process tests: the trajectories are exactly what a
// remote observer's steps make, one batch at a time (the loop waits between batches, so acting is
// never timed and every batch is acted by the weights of the moment it was asked for).
//
// Threads: the loop runs on its own thread, started by the first next(); next() from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/learner.h"
#include "agent/trajectories.h"
#include "common/error.h"
#include "envs/vec_env.h"
#include "observer/observer.h"

namespace distrl::tools {

class LocalObserver {
 public:
  // `options`: the trajectories' shape (observers is 1 here; envs, obs_dim, act_dim, rollout, cut).
  LocalObserver(const std::string& env, std::uint64_t seed, agent::Actor& actor, agent::TrajectoryOptions options)
      : actor_(actor), venv_(env, options.envs, seed, /*autoreset=*/true) {
    options.observers = 1;
    options.queue = 1 << 20;
    options.lockstep = false;
    intake_ = std::make_unique<agent::Trajectories>(options);
  }
  ~LocalObserver() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      stopping_ = true;
    }
    cv_.notify_all();
    if (loop_.joinable()) loop_.join();
  }
  LocalObserver(const LocalObserver&) = delete;
  LocalObserver& operator=(const LocalObserver&) = delete;

  // The next `n` trajectories. Throws Error when the loop failed or stalled for `timeout`.
  std::vector<rl::Fragment> next(int n, std::chrono::milliseconds timeout = std::chrono::minutes(5)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      want_ += n;
    }
    cv_.notify_all();
    if (!loop_.joinable()) loop_ = std::thread([this] { play(); });
    auto batch = intake_->pop(n, timeout);
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) throw Error("the local observer's loop failed: " + failure_);
    if (static_cast<int>(batch.size()) != n) throw Error("the local observer's envs stalled");
    return batch;
  }
  envs::VecEnv& envs() { return venv_; }

 private:
  void play() {
    const observer::StepFn step = [&](const rl::StepReport& r) {
      intake_->observe(r);
      rl::ActReply reply = actor_.act(r.obs.data(), static_cast<int>(r.obs.size()) / venv_.obs_dim());
      intake_->acted(0, reply);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || intake_->stats().queued < want_; });
      return reply;
    };
    try {
      observer::run_stream(venv_, 0, step, stopping_);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      failure_ = e.what();
    }
    intake_->close();  // a waiting next() returns
  }

  agent::Actor& actor_;
  envs::VecEnv venv_;
  std::unique_ptr<agent::Trajectories> intake_;
  std::mutex mu_;
  std::condition_variable cv_;
  long long want_ = 0;
  bool stop_ = false;
  std::string failure_;
  std::atomic<bool> stopping_{false};
  std::thread loop_;
};

}  // namespace distrl::tools
