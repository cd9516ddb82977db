// An environment of your own, loaded by distrl-agent and distrl-observer at run time: no
// rebuild of distrl. Build this file as a shared library against the installed headers
// (CMakeLists.txt beside it), then name it in a config:
//   distrl-launch --config configs/cartpole_ppo.yaml env.plugin=build/libcorridor_env.so env.name=Corridor-v0
//
// Corridor-v0: walk right along a corridor of 8 cells. Observation Box(1): the position in
// [0, 1]; actions Discrete(2): 0 left, 1 right; reward -0.1 per step, +1 on reaching the last
// cell (terminated); truncated after 50 steps. The best return is 0.4 (6 steps of -0.1, then 1).
#include "envs/plugin.h"  // from the installed include/distrl/ (distrl::env_headers)

#include <string>

namespace {

class Corridor final : public distrl::envs::Env {
 public:
  static constexpr int kCells = 8;
  const std::string& name() const override {
    static const std::string n = "Corridor-v0";
    return n;
  }
  distrl::envs::Space observation_space() const override {
    distrl::envs::Space s;
    s.low = {0.0f};
    s.high = {1.0f};
    return s;
  }
  distrl::envs::Space action_space() const override {
    distrl::envs::Space s;
    s.kind = distrl::envs::Space::Kind::Discrete;
    s.n = 2;
    return s;
  }
  int max_episode_steps() const override { return 50; }
  float reward_threshold() const override { return 0.35f; }
  void seed(std::uint64_t) override {}  // deterministic: every episode starts at cell 0
  using Env::reset;
  void reset(float* obs) override {
    cell_ = 0;
    steps_ = 0;
    done_ = false;
    obs[0] = 0.0f;
  }
  using Env::step;
  distrl::envs::Step step(int action, float* obs) override {
    if (action != 0 && action != 1)
      throw distrl::EnvError("Corridor-v0: action " + std::to_string(action) + " is out of range (0 left, 1 right)");
    if (done_) throw distrl::EnvError("Corridor-v0: step() after the episode ended; call reset() first");
    cell_ = action == 1 ? cell_ + 1 : (cell_ > 0 ? cell_ - 1 : 0);
    ++steps_;
    distrl::envs::Step s;
    s.terminated = cell_ == kCells - 1;
    s.reward = s.terminated ? 1.0f : -0.1f;
    s.truncated = !s.terminated && steps_ >= max_episode_steps();
    done_ = s.done();
    obs[0] = static_cast<float>(cell_) / (kCells - 1);
    return s;
  }

 private:
  int cell_ = 0, steps_ = 0;
  bool done_ = true;
};

}  // namespace

DISTRL_ENV_PLUGIN({"Corridor-v0", [] { return static_cast<distrl::envs::Env*>(new Corridor); }})
