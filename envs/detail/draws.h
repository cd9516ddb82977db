// The Box2D environments' random numbers: from the seeded generator, or replayed from a list.
// Tests replay Gymnasium's own np_random draws so that a Gymnasium episode is rebuilt here
// (its terrain exactly, its engines' dispersion step for step). Private to envs/.
// Not thread-safe: one env, one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "envs/random.h"

namespace distrl::envs::detail {

class Draws {
 public:
  // `owner` names the environment in errors.
  explicit Draws(std::string owner) : owner_(std::move(owner)) {}

  void seed(std::uint64_t s) { rng_.seed(s); }
  // The episode the next begin_episode() starts takes its numbers from `draws`, in order (given
  // mid-episode, they wait: that episode's numbers still come from the generator).
  void replay_next(std::vector<double> draws) { next_ = std::move(draws); }
  // A reset begins an episode: it replays what replay_next() gave, else uses the generator.
  void begin_episode();
  // Replayed draws the episode has not used (0 when not replaying).
  std::size_t left() const { return replaying_ ? replay_.size() - at_ : 0; }

  // Uniform in [lo, hi). A replayed draw outside it, or none left, is an EnvError naming it.
  double uniform(double lo, double hi);
  // An integer in [lo, hi), as numpy's integers(lo, hi); a replayed draw must be one.
  int integer(int lo, int hi);

 private:
  double next(double lo, double hi, const char* what);

  std::string owner_;
  Rng rng_;
  std::optional<std::vector<double>> next_;
  std::vector<double> replay_;
  std::size_t at_ = 0;
  bool replaying_ = false;
};

}  // namespace distrl::envs::detail
