#include "training/ps/server.h"

#include <ATen/OpMathType.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "training/ps/detail/shard_entry.h"

// A shard's optimizers: SGD (momentum, nesterov), Adagrad and Adam applied to a dense key or
// to rows of a table, each row counting its own steps (tested against LibTorch's optimizers).
namespace distrl::training::ps {
namespace {

// Rows of a table, stepped in place one row after another: no gathered copies of the rows, their
// state or their step counts, and no temporaries (a push of 5,000 rows x 16 was ~15 tensor
// operations over gathered copies). With `first` (row -> its first index in rows), only first
// occurrences are stepped, grad holding the sum of each row's gradients there.
// Arithmetic in double for the per-row factors (as the dense path's), in T's op type for the
// elements.
template <typename T>
void apply_rows(const autograd::OptimizerSpec& o, const std::int64_t* rows, const std::int32_t* first, std::int64_t n,
                std::int64_t dim, const T* grad, T* value, T* m1, T* m2, double* steps) {
  // Every element in LibTorch's own order of operations (add_(x, alpha) is self + alpha * x,
  // addcmul_ self + value * a * b, addcdiv_ self + value * (a / b)), its scalars computed in
  // double and rounded to the element type as LibTorch's are.
  using Op = at::opmath_type<T>;
  const auto op = [](double v) { return static_cast<Op>(v); };
  const Op wd = op(o.weight_decay), eps = op(o.eps), mom = op(o.momentum), b1 = op(o.beta1), b2 = op(o.beta2);
  const Op minus_lr = op(-o.lr), one_minus_b1 = op(1 - o.beta1), one_minus_b2 = op(1 - o.beta2);
  const bool decay = o.weight_decay != 0;
  enum class Kind { Sgd, Adagrad, Adam };
  const Kind kind = o.kind == "sgd" ? Kind::Sgd : o.kind == "adagrad" ? Kind::Adagrad : Kind::Adam;
  // Each row is a cache miss in the value, its state and its step count (a shard's 500k-row table
  // and its Adagrad state are 68 MB): fetching rows ahead keeps several misses in flight. The
  // push of 5,000 rows x 16 per shard went from 1.85 to 0.95 ms (docs/benchmarks.md, 2026-11-29).
  constexpr std::int64_t kAhead = kPrefetchRows;
  const auto row_bytes = static_cast<std::size_t>(dim) * sizeof(T);
  const auto prefetch = [&](std::int64_t j) {
    const std::int64_t off = rows[j] * dim;
    prefetch_row(value + off, row_bytes);
    if (m1) prefetch_row(m1 + off, row_bytes);
    if (m2) prefetch_row(m2 + off, row_bytes);
    if (steps) prefetch_line(steps + rows[j]);
  };
  for (std::int64_t j = 0; j < std::min(n, kAhead); ++j) prefetch(j);
  for (std::int64_t j = 0; j < n; ++j) {
    if (j + kAhead < n) prefetch(j + kAhead);
    if (first && first[rows[j]] != j) continue;  // a repeat: its gradient is in the first's
    const std::int64_t off = rows[j] * dim;
    T* p = value + off;
    const T* g0 = grad + j * dim;
    const double t = steps ? ++steps[rows[j]] : 0;
    const auto decayed = [&](std::int64_t d) {  // LibTorch adds the decay term only when it is set
      return decay ? static_cast<Op>(g0[d]) + wd * static_cast<Op>(p[d]) : static_cast<Op>(g0[d]);
    };
    if (kind == Kind::Sgd) {
      for (std::int64_t d = 0; d < dim; ++d) {
        Op g = decayed(d);
        if (m1) {
          const Op buf = static_cast<Op>(m1[off + d]) * mom + g;
          m1[off + d] = static_cast<T>(buf);
          g = o.nesterov ? g + mom * buf : buf;
        }
        p[d] = static_cast<T>(static_cast<Op>(p[d]) + minus_lr * g);
      }
    } else if (kind == Kind::Adagrad) {
      const Op minus_clr = op(-o.lr / (1 + (t - 1) * o.lr_decay));
      for (std::int64_t d = 0; d < dim; ++d) {
        const Op g = decayed(d);
        const Op sum = static_cast<Op>(m1[off + d]) + g * g;
        m1[off + d] = static_cast<T>(sum);
        p[d] = static_cast<T>(static_cast<Op>(p[d]) + minus_clr * (g / (std::sqrt(sum) + eps)));
      }
    } else {  // adam
      const Op minus_step_size = op(-o.lr / (1 - std::pow(o.beta1, t)));
      const Op bc2_sqrt = op(std::sqrt(1 - std::pow(o.beta2, t)));
      for (std::int64_t d = 0; d < dim; ++d) {
        const Op g = decayed(d);
        const Op m = static_cast<Op>(m1[off + d]) * b1 + one_minus_b1 * g;
        const Op v = static_cast<Op>(m2[off + d]) * b2 + one_minus_b2 * g * g;
        m1[off + d] = static_cast<T>(m);
        m2[off + d] = static_cast<T>(v);
        p[d] = static_cast<T>(static_cast<Op>(p[d]) + minus_step_size * (m / (std::sqrt(v) / bc2_sqrt + eps)));
      }
    }
  }
}

// Sums the gradients of rows named more than once into their first occurrence's row of `sum`
// (a copy of grad made on the first repeat; untouched when there is none). first[r] is set to
// r's first index in rows; the caller clears it after.
template <typename T>
bool sum_repeats(const std::int64_t* rows, std::int64_t n, std::int64_t dim, const at::Tensor& grad,
                 std::int32_t* first, at::Tensor& sum) {
  T* s = nullptr;
  for (std::int64_t j = 0; j < n; ++j) {
    std::int32_t& f = first[rows[j]];
    if (f < 0) {
      f = static_cast<std::int32_t>(j);
      continue;
    }
    if (!s) {
      sum = grad.clone();
      s = sum.data_ptr<T>();
    }
    for (std::int64_t d = 0; d < dim; ++d) s[f * dim + d] += s[j * dim + d];
  }
  return s != nullptr;
}

}  // namespace

void ShardServer::apply_locked(Entry& e, const at::Tensor& rows, at::Tensor g) {
  at::NoGradGuard no_grad;
  const auto& o = opt_.optimizer;
  if (rows.defined()) {  // rows of a table: checked (check_rows) and contiguous, g [rows, dim] of its type
    // A row named twice gets the sum of its gradients, stepped once, as in a sync round and as
    // PyTorch coalesces a sparse gradient. Found with e.first (row -> first index; -1 between
    // calls, one int32 per row of the table), summed in place of sorting the ids.
    if (rows.numel() >= std::numeric_limits<std::int32_t>::max())
      throw ProtocolError("ps: a push of " + std::to_string(rows.numel()) + " rows, over 2^31");
    if (e.first.size() != static_cast<std::size_t>(e.value.size(0))) e.first.assign(e.value.size(0), -1);
    const std::int64_t* ids = rows.data_ptr<std::int64_t>();
    const std::int64_t n = rows.numel(), dim = e.value.size(1);
    at::Tensor grad = g.contiguous();
    const bool momentum = o.kind == "sgd" ? o.momentum != 0 : true;
    if (momentum && !e.m1.defined()) e.m1 = at::zeros_like(e.value);
    if (o.kind == "adam" && !e.m2.defined()) e.m2 = at::zeros_like(e.value);
    if (o.kind != "sgd" && !e.steps.defined()) e.steps = at::zeros({e.value.size(0)}, at::kDouble);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, e.value.scalar_type(), "ps_apply_rows", [&] {
      at::Tensor sum;
      const bool repeats = sum_repeats<scalar_t>(ids, n, dim, grad, e.first.data(), sum);
      apply_rows<scalar_t>(o, ids, repeats ? e.first.data() : nullptr, n, dim,
                           (repeats ? sum : grad).data_ptr<scalar_t>(), e.value.data_ptr<scalar_t>(),
                           momentum ? e.m1.data_ptr<scalar_t>() : nullptr,
                           o.kind == "adam" ? e.m2.data_ptr<scalar_t>() : nullptr,
                           o.kind != "sgd" ? e.steps.data_ptr<double>() : nullptr);
    });
    for (std::int64_t j = 0; j < n; ++j) e.first[static_cast<std::size_t>(ids[j])] = -1;
    e.stats.updates++;
    return;
  }
  // A dense key: LibTorch's operations on the whole tensor, in place. Its step count is kept in
  // double, as the rows' are: 1 - 0.999^t in float32 loses four digits to cancellation (the row
  // path's Adam parted from LibTorch's by 10 ulps in 3 steps when it was float32).
  at::Tensor p = e.value;
  if (o.weight_decay != 0) g = g + o.weight_decay * p;
  auto state = [&](at::Tensor& s) -> at::Tensor& {
    if (!s.defined()) s = at::zeros_like(e.value);
    return s;
  };
  double step = 0;
  if (o.kind != "sgd") {
    if (!e.steps.defined()) e.steps = at::zeros({1}, at::kDouble);
    step = e.steps.add_(1).item<double>();
  }
  if (o.kind == "sgd") {
    at::Tensor upd = g;
    if (o.momentum != 0) {
      at::Tensor& buf = state(e.m1);
      buf.mul_(o.momentum).add_(g);
      upd = o.nesterov ? g + o.momentum * buf : buf;
    }
    p.sub_(upd, o.lr);
  } else if (o.kind == "adagrad") {
    at::Tensor& sum = state(e.m1);
    sum.addcmul_(g, g);
    p.addcdiv_(g, sum.sqrt().add_(o.eps), -o.lr / (1 + (step - 1) * o.lr_decay));
  } else {  // adam
    at::Tensor &m = state(e.m1), &v = state(e.m2);
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
    p.addcdiv_(m, v.sqrt().div_(std::sqrt(bc2)).add_(o.eps), -o.lr / bc1);
  }
  e.stats.updates++;
}

}  // namespace distrl::training::ps
