// The environments' random numbers: mt19937_64 (fully specified by the C++ standard) and our
// own uniform mapping, so a seed gives the same trajectory on every platform and library
// (std::uniform_real_distribution is implementation-defined).
#pragma once

#include <cstdint>
#include <random>

namespace distrl::envs {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : gen_(seed) {}
  void seed(std::uint64_t s) { gen_.seed(s); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

 private:
  std::mt19937_64 gen_;
};

}  // namespace distrl::envs
