// Streaming quantiles in fixed memory, for long runs that report latency percentiles: a
// histogram with logarithmic buckets, each 2 % wider than the last, from 0.01 to 1e10 (in the
// caller's unit, e.g. microseconds: 10 ns to 3 hours). A quantile is within 1 % of the exact
// one (the bucket's geometric middle, clamped to the smallest and largest value seen). 1,400
// counters, 11 KiB, whatever the number of samples. Values at or below 0.01 count in the first
// bucket, above 1e10 in the last. Not thread-safe: one owner adds, or lock around it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace distrl {

class QuantileSketch {
 public:
  void add(double v) {
    if (!(v == v)) return;  // NaN
    ++buckets_[index(v)];
    ++count_;
    lo_ = std::min(lo_, v);
    hi_ = std::max(hi_, v);
  }
  template <typename It>
  void add(It first, It last) {
    for (; first != last; ++first) add(static_cast<double>(*first));
  }
  std::uint64_t count() const { return count_; }

  // The q-quantile (0 <= q <= 1) by the same nearest-rank rule as sorting every sample; 0 when
  // empty.
  double quantile(double q) const {
    if (count_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_ - 1) + 0.5);
    std::uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += buckets_[i];
      if (seen > rank) return std::clamp(kLow * std::pow(kRatio, i + 0.5), lo_, hi_);
    }
    return hi_;
  }

 private:
  static constexpr double kLow = 0.01, kRatio = 1.02;
  static constexpr int kBuckets = 1400;  // kLow * 1.02^1400 > 1e10
  static int index(double v) {
    if (v <= kLow) return 0;
    const double i = std::log(v / kLow) / std::log(kRatio);
    return static_cast<int>(std::min(i, static_cast<double>(kBuckets - 1)));
  }
  std::array<std::uint64_t, kBuckets> buckets_{};
  std::uint64_t count_ = 0;
  double lo_ = std::numeric_limits<double>::infinity(), hi_ = -std::numeric_limits<double>::infinity();
};

}  // namespace distrl
