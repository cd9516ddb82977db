// Tolerances for tests that compare two computations of the same mathematics whose floating-point
// sums run in different orders: a pipeline's micro-batches against whole batches, a ring
// all-reduce against a local sum, the kernels another machine's OpenBLAS picks. A tolerance fitted
// to one machine's observed difference fails on the next machine (PipelineWorkloadTest's 2e-5
// did, by 2.25e-5, on an AVX2 machine); these are derived instead, in one of three ways.
//
// One reduction. Summing n terms in any order lands within gamma(n) * sum|x| of the exact sum
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 4.2:
// gamma(n) = n*u / (1 - n*u), u = 2^-24 for float32, 2^-53 for float64), so two orders differ by
// at most 2 * gamma(n) * sum|x|: `reorder_bound`. A dot product, a matmul's entry or a gradient
// summed over rows is such a sum.
//
// Many steps (training). Step 1's rounding changes step 2's data; how much that grows depends on
// the dynamics, and no a-priori bound is tight. `Reorderings` measures it where the test runs, on
// that machine's kernels: the test computes its own reference (no code of the system under test)
// in several summation orders that are all exact in real arithmetic -- whole batches,
// micro-batches accumulated forwards and backwards, another evaluation batch -- and the system
// under test, one more such order, must land within kSpreadFactor times the widest gap among
// them of the first (and never less than kSpreadFactor units in the last place of the largest
// value: orders that happen to agree here say nothing about a third).
//
// Accuracy. Compared as counts of images, never as percentages at a float boundary. The correct
// counts of two orders differ by at most the number of images on which their predictions differ;
// `CorrectCounts` takes the most any measured order's predictions differ from the first's, and
// lets the system under test's count differ from the reference's by kSpreadFactor times that.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace distrl::testing {

constexpr double kFloat32Unit = 0x1p-24;  // unit roundoff u: half an ulp of 1
constexpr double kFloat64Unit = 0x1p-53;

// The system under test is one more legitimate order: a gap 3 times the widest among the orders
// measured (two or more) is outside what another order gave on these runs (the system's own gap
// was at most the orders' widest, under OpenBLAS's Haswell and SkylakeX kernels alike) and far
// inside what a real bug does (25-1000 times the bound, tests/README.md).
constexpr double kSpreadFactor = 3.0;

// Float64 graphs of a few small hops (the distributed-autograd tests: 4x4 weights, inputs of 2
// rows, at most 4 hops and 4 branches). Distributed and local autograd run the same kernels; what
// differs is the order in which a tensor used by several branches sums their gradients (and the
// loss's parts). Each such sum has at most 16 terms, each at most the largest value, so a
// reordering moves it by at most 2 * gamma(16) * 16 = 1.1e-13 of the largest value (float64);
// each of the at most 4 hops behind it multiplies a change by at most 4 * 1.1 (tanh' <= 1, 4 terms
// of |w| <= 1.1: weight_of's cosines + 0.3), 375 in all: 4.3e-11. Relative error (rel_err: of the
// largest value) below kFloat64GraphTolerance, twice that, is equal to rounding; a gradient
// counted twice or dropped is off by order 1.
constexpr double kFloat64GraphTolerance = 1e-10;

// Higham's gamma(n); n * u must stay below 1.
inline double gamma_n(double n, double u = kFloat32Unit) { return n * u / (1 - n * u); }

// The most two orders of summing n terms can differ by, given the sum of their magnitudes.
inline double reorder_bound(double n, double sum_abs, double u = kFloat32Unit) { return 2 * gamma_n(n, u) * sum_abs; }

// Half a unit in the last of `digits` significant digits of v: what printing v to a CSV with
// ostream's default precision (6) can change it by.
inline double print_rounding(double v, int digits = 6) {
  if (v == 0 || !std::isfinite(v)) return 0;
  return 0.5 * std::pow(10.0, std::floor(std::log10(std::abs(v))) - (digits - 1));
}

// Every value of some tensors, flattened in order, as doubles.
inline std::vector<double> flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<double> out;
  for (const at::Tensor& t : tensors) {
    const at::Tensor d = t.detach().to(at::kCPU).to(at::kDouble).contiguous();
    const double* p = d.data_ptr<double>();
    out.insert(out.end(), p, p + d.numel());
  }
  return out;
}

// The largest |a - b|; infinite for different sizes or any NaN (max() would skip a NaN).
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = std::abs(a[i] - b[i]);
    if (std::isnan(x)) return INFINITY;
    d = std::max(d, x);
  }
  return d;
}

// One quantity (a number or the values of some tensors) computed by the test in several
// summation orders; the first is the reference the system under test is compared with.
class Reorderings {
 public:
  explicit Reorderings(std::string what, double u = kFloat32Unit) : what_(std::move(what)), u_(u) {}

  void add(std::vector<double> values) { orders_.push_back(std::move(values)); }
  void add(double value) { add(std::vector<double>{value}); }
  void add(const std::vector<at::Tensor>& tensors) { add(flatten(tensors)); }

  const std::vector<double>& reference() const { return orders_.at(0); }
  // The widest gap between any two orders (max-norm).
  double width() const {
    double w = 0;
    for (std::size_t i = 0; i < orders_.size(); ++i)
      for (std::size_t j = i + 1; j < orders_.size(); ++j) w = std::max(w, max_abs_diff(orders_[i], orders_[j]));
    return w;
  }
  // What the system under test may differ from the reference by, before the rounding of the file
  // its value was read from.
  double tolerance() const {
    double scale = 0;
    for (double v : reference()) scale = std::max(scale, std::abs(v));
    return kSpreadFactor * std::max(width(), 2 * u_ * scale);  // 2u * |x| >= an ulp of x
  }
  // Empty when `got` is within tolerance() + rounding of the reference; else what differs, with
  // the numbers (for a gtest message).
  std::string check(const std::vector<double>& got, double rounding = 0) const {
    const double gap = max_abs_diff(got, reference()), tol = tolerance() + rounding;  // NaN: gap infinite
    if (std::getenv("DISTRL_TEST_TOLERANCES") != nullptr)                             // the by-hand check's table
      std::cerr << "tolerance: " << what_ << ": gap " << gap << " of " << tol << " (orders span " << width() << ")\n";
    if (gap <= tol) return "";
    std::ostringstream s;
    s.precision(9);
    s << what_ << ": off the one-process reference by " << gap << "; " << orders_.size()
      << " summation orders of the reference span " << width() << ", so reordering explains at most " << tol;
    return s.str();
  }
  std::string check(double got, double rounding = 0) const { return check(std::vector<double>{got}, rounding); }
  std::string check(const std::vector<at::Tensor>& got) const { return check(flatten(got)); }
  std::size_t size() const { return orders_.size(); }

 private:
  std::string what_;
  double u_;
  std::vector<std::vector<double>> orders_;
};

// The summation orders a test computes its reference in (`backward_in_order`): the whole batch,
// its parts first to last, its parts last to first.
constexpr int kOrders = 3;

// Sizes of `parts` nearly equal slices of `rows` rows (the first ones one row larger).
inline std::vector<std::int64_t> equal_parts(std::int64_t rows, std::int64_t parts) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t i = 0; i < parts; ++i) sizes.push_back(rows / parts + (i < rows % parts ? 1 : 0));
  return sizes;
}

// Backpropagates the mean loss over the rows of x (targets y) in summation order `order` of
// kOrders, all the same mathematics: 0 the whole batch; 1 and 2 the slices `sizes`, each slice's
// mean loss weighted by its share of the rows, accumulated first to last (1) or last to first
// (2) -- as micro-batches, or ranks whose gradients are averaged, add them. Returns the loss.
template <typename Forward, typename Loss>
double backward_in_order(int order, const at::Tensor& x, const at::Tensor& y, const std::vector<std::int64_t>& sizes,
                         Forward forward, Loss loss) {
  if (order == 0) {
    const at::Tensor l = loss(forward(x), y);
    l.backward();
    return l.item<double>();
  }
  std::vector<std::int64_t> start{0};
  for (std::int64_t s : sizes) start.push_back(start.back() + s);
  double total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::size_t p = order == 1 ? i : sizes.size() - 1 - i;
    const at::Tensor l = loss(forward(x.narrow(0, start[p], sizes[p])), y.narrow(0, start[p], sizes[p])) *
                         (static_cast<double>(sizes[p]) / static_cast<double>(x.size(0)));
    l.backward();
    total += l.item<double>();
  }
  return total;
}

// The count of correctly classified images, reference first, with the predictions of each order.
class CorrectCounts {
 public:
  // logits: [images, classes] of one order; correct: how many of its predictions are right.
  void add(const at::Tensor& logits, std::int64_t correct) {
    const at::Tensor predicted = logits.detach().argmax(1);
    if (!first_.defined()) {
      first_ = predicted;
      reference_ = correct;
    } else {
      flips_ = std::max(flips_, predicted.ne(first_).sum().item<std::int64_t>());
    }
  }
  std::int64_t reference() const { return reference_; }
  // The most images on which a measured order's predictions differ from the reference's.
  std::int64_t flips() const { return flips_; }
  // What the system under test's count may differ from the reference's by (at least one image).
  std::int64_t tolerance() const {
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(kSpreadFactor * static_cast<double>(flips_))));
  }

 private:
  at::Tensor first_;
  std::int64_t reference_ = 0, flips_ = 0;
};

}  // namespace distrl::testing
