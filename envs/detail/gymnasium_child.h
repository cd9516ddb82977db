// One Python child stepping n copies of a Gymnasium environment, for GymnasiumEnv (n = 1) and
// VecEnv (n = env.per_observer). Private to envs/.
//
// The child is `PYTHON -u -W ignore -c <script>` (PYTHON: DISTRL_GYMNASIUM_PYTHON, else python3)
// in a process group of its own (a rank's stop signal is for the rank; the child leaves when the
// socket closes). Its stdin and stdout are one end of a socketpair, its stderr ours, and its fd 3
// a memfd both map: the batch buffer. Control is a line each way per request:
//   make ID N   -> "spec MAX_STEPS THRESHOLD", "observation DIM LOW... HIGH...",
//                  "action discrete N" or "action box DIM LOW... HIGH..."   (once)
//   map SIZE CMD SEED ACT OBS FINAL REWARD TERMINATED TRUNCATED -> "ok"   (once: byte offsets)
//   reset       -> "ok"    envs with cmd[i] = 1 (no seed) or 2 (seed[i]) reset, obs rows written
//   step        -> "ok"    envs with cmd[i] > 0 step with act row i; 2: then reset if it ended,
//                          3: then reset whatever happened (a time limit); a reset writes the
//                          ended episode's last observation to final row i
//   any exception -> "error [env I: ]TYPE: MESSAGE"; no gymnasium -> "error ..." and exit 3.
// So a batch of n env steps costs one wake-up each way and no text per env.
//
// The child is untrusted: its lines are bounded (64 MiB) and parsed whole, the sizes it
// announces are capped (2^20 observation floats, 65,536 Discrete actions, 4,096 Box actions,
// 1 GiB of buffer), flags it writes are copied out and then checked (0 or 1), and the buffer is
// sealed against shrinking or growing before it is mapped (a child cannot make a read of ours
// fault). Every wait has a timeout; a child that dies, says something malformed or is silent
// past it is stopped (SIGKILL after 2 s) and the call throws EnvError naming the env and what
// to do. Not thread-safe: one child, one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "envs/env.h"

namespace distrl::envs::detail {

class GymnasiumChild {
 public:
  // What step() does with env i.
  enum Command : std::uint8_t { kSkip = 0, kStep = 1, kStepThenResetIfDone = 2, kStepThenReset = 3 };

  // Where step() writes; rows of stepped envs only (final_obs: rows of envs that were reset).
  struct Out {
    float* obs;                // n x obs dim
    float* final_obs;          // n x obs dim
    float* rewards;            // n
    std::uint8_t* terminated;  // n: Gymnasium's flags as it gave them (both may be set)
    std::uint8_t* truncated;   // n
  };

  // Starts the child, makes n envs `id` (Gymnasium's ID, without the prefix) and maps the
  // buffer (blocking; make_timeout_s for making, step_timeout_s for the rest).
  GymnasiumChild(const std::string& id, int n, double step_timeout_s, double make_timeout_s);
  ~GymnasiumChild();
  GymnasiumChild(const GymnasiumChild&) = delete;
  GymnasiumChild& operator=(const GymnasiumChild&) = delete;

  const std::string& name() const { return name_; }  // gymnasium:ID
  int size() const { return n_; }
  const Space& observation_space() const { return obs_space_; }
  const Space& action_space() const { return act_space_; }
  int max_episode_steps() const { return max_steps_; }   // 1,000,000 when Gymnasium sets none
  float reward_threshold() const { return threshold_; }  // +inf when Gymnasium sets none

  // Resets env i where which[i] != 0, with reset(seed=seeds[i]) when seeds[i] is set; writes
  // those envs' rows of obs (n x obs dim).
  void reset(const std::uint8_t* which, const std::optional<std::uint64_t>* seeds, float* obs);
  // EnvError naming the env when an action of an env to step is out of range, not finite or of
  // the wrong kind (changes nothing).
  void check(const std::uint8_t* commands, const int* actions) const;
  void check(const std::uint8_t* commands, const float* actions) const;
  // Steps env i as commands[i] says with action i: discrete actions (n), or n x dim continuous
  // ones. Checks them first (check()); any other EnvError leaves the envs' state to Gymnasium.
  void step(const std::uint8_t* commands, const int* actions, const Out& out);
  void step(const std::uint8_t* commands, const float* actions, const Out& out);

 private:
  struct Layout {
    std::size_t size = 0, cmd = 0, seed = 0, act = 0, obs = 0, final_obs = 0, reward = 0, terminated = 0, truncated = 0;
  };
  // Starts PYTHON with the script, the buffer at its fd 3: 0 or posix_spawn's error.
  int spawn(const std::string& python);
  void make(int n, double make_timeout_s);
  void map_buffer();
  // The env's name in an error: "gymnasium:ID" or, with n > 1, "gymnasium:ID (env I)".
  std::string which(int i) const;
  void run(const std::string& request);  // sends it, waits for "ok"
  void finish_step(const std::uint8_t* commands, const Out& out);
  void send(const std::string& line);
  // The next answer line, split; "error ..." from Gymnasium is an EnvError; a dead or silent
  // child is too (and is stopped).
  std::vector<std::string> receive(const std::string& expect, double timeout_s);
  // Stops the child and throws EnvError naming what happened and how it ended; `closed`: it
  // closed the socket (wait a moment for its exit status).
  [[noreturn]] void fail(const std::string& what, bool closed = false);
  void stop_child();
  unsigned char* at(std::size_t offset) const { return buffer_ + offset; }

  std::string name_, id_;
  int n_ = 0;
  double step_timeout_s_;
  int fd_ = -1, memfd_ = -1;
  pid_t pid_ = -1;
  std::string input_;
  Layout layout_;
  unsigned char* buffer_ = nullptr;
  Space obs_space_, act_space_;
  int max_steps_ = 1000000;
  float threshold_ = 0;
};

}  // namespace distrl::envs::detail
