#include "envs/detail/draws.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace distrl::envs::detail {

void Draws::begin_episode() {
  replaying_ = next_.has_value();
  if (replaying_) replay_ = std::move(*next_);
  next_.reset();
  at_ = 0;
}

double Draws::next(double lo, double hi, const char* what) {
  if (at_ >= replay_.size())
    throw EnvError(owner_ + ": the replayed draws ran out at " + std::to_string(at_) + " (wanted " + what + ")");
  const double v = replay_[at_];
  if (!(v >= lo && v < hi))
    throw EnvError(owner_ + ": replayed draw " + std::to_string(at_) + " is " + std::to_string(v) + ", not " + what +
                   " in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  ++at_;
  return v;
}

double Draws::uniform(double lo, double hi) { return replaying_ ? next(lo, hi, "a uniform") : rng_.uniform(lo, hi); }

int Draws::integer(int lo, int hi) {
  if (!replaying_) return lo + std::min(hi - lo - 1, static_cast<int>(rng_.uniform() * (hi - lo)));
  const double v = next(lo, hi, "an integer");
  if (v != std::floor(v))
    throw EnvError(owner_ + ": replayed draw " + std::to_string(at_ - 1) + " is " + std::to_string(v) +
                   ", not an integer");
  return static_cast<int>(v);
}

}  // namespace distrl::envs::detail
