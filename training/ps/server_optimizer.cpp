#include "training/ps/server.h"

#include <torch/torch.h>

#include <cmath>

#include "training/ps/detail/shard_entry.h"

// A shard's optimizers: SGD (momentum, nesterov), Adagrad and Adam applied to a dense key or
// to rows of a table, each row counting its own steps (tested against LibTorch's optimizers).
namespace distrl::training::ps {

void ShardServer::apply_locked(Entry& e, const at::Tensor& rows, at::Tensor g) {
  at::NoGradGuard no_grad;
  const auto& o = opt_.optimizer;
  const bool sparse = rows.defined();
  at::Tensor p = sparse ? e.value.index_select(0, rows) : e.value;
  if (o.weight_decay != 0) g = g + o.weight_decay * p;
  auto state = [&](at::Tensor& s) {
    if (!s.defined()) s = at::zeros_like(e.value);
    return sparse ? s.index_select(0, rows) : s;
  };
  auto put = [&](at::Tensor& s, const at::Tensor& v) {
    if (sparse) s.index_copy_(0, rows, v);
  };
  // Step counts: one per row for tables (a row's Adam bias correction counts its own updates).
  // Kept in double, as the dense path's: 1 - 0.999^t in float32 loses four digits to
  // cancellation (the row path's Adam parted from LibTorch's by 10 ulps in 3 steps).
  at::Tensor t;
  if (o.kind != "sgd") {
    if (!e.steps.defined()) e.steps = at::zeros({sparse ? e.value.size(0) : 1}, at::kDouble);
    if (sparse) {
      e.steps.index_add_(0, rows, at::ones({rows.numel()}, at::kDouble));
      std::vector<std::int64_t> shape(static_cast<std::size_t>(p.dim()), 1);
      shape[0] = rows.numel();
      t = e.steps.index_select(0, rows).view(shape);
    } else {
      e.steps.add_(1);
    }
  }
  if (o.kind == "sgd") {
    at::Tensor upd = g;
    if (o.momentum != 0) {
      at::Tensor buf = state(e.m1);
      buf.mul_(o.momentum).add_(g);
      put(e.m1, buf);
      upd = o.nesterov ? g + o.momentum * buf : buf;
    }
    p.sub_(upd, o.lr);
  } else if (o.kind == "adagrad") {
    at::Tensor sum = state(e.m1);
    sum.addcmul_(g, g);
    put(e.m1, sum);
    if (sparse) {
      const at::Tensor clr = (o.lr / (1 + (t - 1) * o.lr_decay)).to(p.scalar_type());
      p.sub_(clr * g / (sum.sqrt() + o.eps));
    } else {
      const double step = e.steps.item<double>();
      p.addcdiv_(g, sum.sqrt().add_(o.eps), -o.lr / (1 + (step - 1) * o.lr_decay));
    }
  } else {  // adam
    at::Tensor m = state(e.m1), v = state(e.m2);
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    put(e.m1, m);
    put(e.m2, v);
    if (sparse) {
      const at::Tensor step_size = (o.lr / (1 - at::pow(o.beta1, t))).to(p.scalar_type());
      const at::Tensor bc2_sqrt = (1 - at::pow(o.beta2, t)).sqrt().to(p.scalar_type());
      p.sub_(step_size * m / (v.sqrt() / bc2_sqrt + o.eps));
    } else {
      const double step = e.steps.item<double>();
      const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
      p.addcdiv_(m, v.sqrt().div_(std::sqrt(bc2)).add_(o.eps), -o.lr / bc1);
    }
  }
  if (sparse) e.value.index_copy_(0, rows, p);
  e.stats.updates++;
}

}  // namespace distrl::training::ps
