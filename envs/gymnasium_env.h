// Any Gymnasium environment, stepped by Gymnasium itself in a Python child process:
// env.name `gymnasium:ID` (e.g. gymnasium:BipedalWalker-v3, gymnasium:HalfCheetah-v5) makes one.
// For environments with no native port, and to evaluate a policy trained on a native port in
// Gymnasium's own (`distrl-agent --eval ... env.name=gymnasium:BipedalWalker-v3`).
//
// The child is `PYTHON -u -c <script>` (PYTHON: DISTRL_GYMNASIUM_PYTHON, else python3) in a
// process group of its own (a rank's stop signal is for the rank; the child leaves when the
// socket closes), its stdin and stdout one end of a socketpair, its stderr ours; it speaks one
// line per request on that socket, and whatever else prints goes to stderr.
// Observation spaces must be a Box (flattened), action spaces Discrete or a 1-D Box; anything
// else is refused at construction naming the space, and so are sizes a policy cannot hold (over
// 2^20 observation floats, 65,536 Discrete actions or 4,096 Box actions), naming the limit. A seed given with seed() goes to the next
// reset(seed=...); later resets continue Gymnasium's generator, as Gymnasium's own loop does.
// A terminal step at the time limit is `terminated` only, as in the native envs.
//
// Failures are EnvErrors naming the env and what to do: no python or no gymnasium, an unknown
// ID, an exception in Gymnasium (its message), a child that died (its exit status; Python's
// traceback is on stderr above) or said nothing for `timeout_s` (120 s for make, 60 s per step;
// the child is then killed). The destructor closes the socket, so the child leaves, and reaps it
// (SIGKILL after 2 s). Each env is one Python process (~50-80 MB): mind env.per_observer.
// Not thread-safe: one env, one thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "envs/env.h"

namespace distrl::envs {

class GymnasiumEnv final : public Env {
 public:
  // `id`: Gymnasium's ID, without the prefix. Starts the child and makes the env (blocking).
  explicit GymnasiumEnv(const std::string& id, double step_timeout_s = 60, double make_timeout_s = 120);
  ~GymnasiumEnv() override;
  GymnasiumEnv(const GymnasiumEnv&) = delete;
  GymnasiumEnv& operator=(const GymnasiumEnv&) = delete;

  const std::string& name() const override { return name_; }
  Space observation_space() const override { return obs_space_; }
  Space action_space() const override { return act_space_; }
  int max_episode_steps() const override { return max_steps_; }   // 1,000,000 when Gymnasium sets none
  float reward_threshold() const override { return threshold_; }  // +inf when Gymnasium sets none
  void seed(std::uint64_t seed) override { pending_seed_ = seed; }
  using Env::reset;
  void reset(float* obs) override;
  using Env::step;
  Step step(int action, float* obs) override;
  Step step(const float* action, float* obs) override;

 private:
  void send(const std::string& line);
  // The next answer line, split; "error ..." from Gymnasium is an EnvError; a dead or silent
  // child is too (and is stopped).
  std::vector<std::string> receive(const std::string& expect, double timeout_s);
  // Stops the child and throws EnvError naming what happened and how it ended; `closed`: it
  // closed the socket (wait a moment for its exit status).
  [[noreturn]] void fail(const std::string& what, bool closed = false);
  // The observation's words, or fail() (the child is stopped) when they do not fit its space.
  void read_obs(const std::vector<std::string>& words, std::size_t from, float* obs);
  Step finish_step(const std::vector<std::string>& words, float* obs);
  void stop_child();

  std::string name_, id_;
  double step_timeout_s_;
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string buffer_;
  Space obs_space_, act_space_;
  int max_steps_ = 1000000;
  float threshold_ = 0;
  std::optional<std::uint64_t> pending_seed_;
  bool done_ = true;
};

}  // namespace distrl::envs
