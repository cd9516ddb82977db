// Any Gymnasium environment, stepped by Gymnasium itself in a Python child process:
// env.name `gymnasium:ID` (e.g. gymnasium:BipedalWalker-v3, gymnasium:HalfCheetah-v5) makes one.
// For environments with no native port, and to evaluate a policy trained on a native port in
// Gymnasium's own (`distrl-agent --eval ... env.name=gymnasium:BipedalWalker-v3`).
//
// The child (envs/detail/gymnasium_child.h) is one Python process per env (~50-80 MB): a
// VecEnv of gymnasium:ID envs shares one child among all its envs, stepping them in one batch.
// Observation spaces must be a Box (flattened), action spaces Discrete or a 1-D Box; anything
// else is refused at construction naming the space, and so are sizes a policy cannot hold (over
// 2^20 observation floats, 65,536 Discrete actions or 4,096 Box actions), naming the limit. A
// seed given with seed() goes to the next reset(seed=...); later resets continue Gymnasium's
// generator, as Gymnasium's own loop does. A terminal step at the time limit is `terminated`
// only, as in the native envs.
//
// Failures are EnvErrors naming the env and what to do: no python or no gymnasium, an unknown
// ID, an exception in Gymnasium (its message), a child that died (its exit status; Python's
// traceback is on stderr above), said something malformed, or said nothing for its timeout
// (120 s for make, 60 s per step; the child is then killed). The destructor closes the socket,
// so the child leaves, and reaps it (SIGKILL after 2 s). Not thread-safe: one env, one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "envs/env.h"

namespace distrl::envs {

namespace detail {
class GymnasiumChild;
}

class GymnasiumEnv final : public Env {
 public:
  // `id`: Gymnasium's ID, without the prefix. Starts the child and makes the env (blocking).
  explicit GymnasiumEnv(const std::string& id, double step_timeout_s = 60, double make_timeout_s = 120);
  ~GymnasiumEnv() override;
  GymnasiumEnv(const GymnasiumEnv&) = delete;
  GymnasiumEnv& operator=(const GymnasiumEnv&) = delete;

  const std::string& name() const override;
  Space observation_space() const override;
  Space action_space() const override;
  int max_episode_steps() const override;   // 1,000,000 when Gymnasium sets none
  float reward_threshold() const override;  // +inf when Gymnasium sets none
  void seed(std::uint64_t seed) override { pending_seed_ = seed; }
  using Env::reset;
  void reset(float* obs) override;
  using Env::step;
  Step step(int action, float* obs) override;
  Step step(const float* action, float* obs) override;

 private:
  template <typename Action>
  Step step_one(const Action* action, float* obs);

  std::unique_ptr<detail::GymnasiumChild> child_;
  std::optional<std::uint64_t> pending_seed_;
  bool done_ = true;
};

}  // namespace distrl::envs
