#include "training/pipeline/stage.h"

#include <torch/torch.h>

#include <algorithm>

#include "common/log.h"

namespace distrl::training::pipeline {

namespace {

constexpr int kMaxDims = 8;
constexpr std::int64_t kHeader = kMaxDims + 2;  // ndim, dims..., dtype

// A transfer's tag: unique per (direction, micro-batch, receiving virtual stage) within a step,
// so the order of messages between two stages never matters; steps reuse tags in order.
int tag_of(int kind, int mb, int vs, int virtual_stages) { return ((mb * virtual_stages + vs) << 1) | kind; }

// The gradient sent back for a piece's input: zeros where autograd left none (the output does
// not depend on the input), so the stage before gets a tensor to run its backward with.
at::Tensor input_gradient(const at::Tensor& g, const at::Tensor& input) {
  return g.defined() ? g : at::zeros_like(input);
}

bool uses_split(const Schedule& s) {
  for (const auto& list : s.actions)
    for (const auto& a : list)
      if (a.op == Op::I || a.op == Op::W) return true;
  return false;
}

}  // namespace

struct PipelineStage::Slot {
  at::Tensor input;                   // the data micro-batch, or the received activation (requires grad)
  std::vector<at::Tensor> outs;       // each child's output (split backward), else just the last
  at::Tensor root;                    // the weighted loss (last virtual stage) or the output
  at::Tensor grad;                    // the received gradient of the output
  at::Tensor send_f, send_b;          // what SF / SB send
  std::vector<at::Tensor> out_grads;  // after I: the gradient of each child's output
  bool backward_done = false;         // B, or W, has run
};

std::vector<std::int64_t> microbatch_sizes(std::int64_t rows, int m) {
  if (m < 1) throw ArgumentError("micro-batches must be >= 1, got " + std::to_string(m));
  const std::int64_t size = (rows + m - 1) / m;
  if (rows < m || size * (m - 1) >= rows)
    throw ArgumentError("a batch of " + std::to_string(rows) + " rows does not split into " + std::to_string(m) +
                        " micro-batches of ceil(" + std::to_string(rows) + "/" + std::to_string(m) +
                        ") = " + std::to_string(size) + " rows (the last would be empty); use " +
                        std::to_string((rows + size - 1) / size) + " micro-batches or another batch size");
  std::vector<std::int64_t> out(m, size);
  out.back() = rows - size * (m - 1);
  return out;
}

PipelineStage::PipelineStage(std::shared_ptr<transport::ProcessGroup> pg, std::vector<torch::nn::Sequential> pieces,
                             Schedule schedule, StageOptions options)
    : pg_(std::move(pg)), pieces_(std::move(pieces)), schedule_(lower(std::move(schedule))), options_(options) {
  if (!pg_) throw ArgumentError("pipeline stage: no process group");
  if (pg_->size() != schedule_.stages)
    throw ArgumentError("pipeline stage: the group has " + std::to_string(pg_->size()) + " ranks, the schedule " +
                        std::to_string(schedule_.stages) + " stages");
  if (static_cast<int>(pieces_.size()) != schedule_.chunks)
    throw ArgumentError("pipeline stage " + std::to_string(pg_->rank()) + ": holds " + std::to_string(pieces_.size()) +
                        " pieces, the schedule " + std::to_string(schedule_.chunks) + " per stage");
  VerifyOptions vo;
  vo.max_activations = options_.max_activations;
  vo.sends_block = pg_->backend() == "nccl";  // rendezvous send/recv, matched in order
  vo.costs = options_.costs;
  plan_ = verify(schedule_, vo);
  split_ = uses_split(schedule_);
}

PipelineStage::~PipelineStage() {
  try {
    reap_sends(true);
  } catch (const std::exception& e) {
    DISTRL_LOG(Debug, "pipeline stage: a send did not finish: " << e.what());
  }
}

int PipelineStage::stage() const { return pg_->rank(); }
bool PipelineStage::holds_first() const { return stage() == 0; }
bool PipelineStage::holds_last() const { return schedule_.stage_of(schedule_.virtual_stages() - 1) == stage(); }

void PipelineStage::send(const at::Tensor& t, int dst, int tag) {
  const at::Tensor c = t.contiguous();
  if (c.dim() > kMaxDims)
    throw PipelineError("cannot send a tensor of " + std::to_string(c.dim()) + " dimensions (at most 8)");
  at::Tensor h = at::zeros({kHeader}, at::kLong);
  auto* p = h.data_ptr<std::int64_t>();
  p[0] = c.dim();
  for (int d = 0; d < c.dim(); ++d) p[1 + d] = c.size(d);
  p[kHeader - 1] = static_cast<std::int64_t>(c.scalar_type());
  sends_.emplace_back(pg_->isend(h, dst, tag), h);
  sends_.emplace_back(pg_->isend(c, dst, tag), c);
}

at::Tensor PipelineStage::recv(int src, int tag) {
  at::Tensor h = at::empty({kHeader}, at::kLong);
  pg_->irecv(h, src, tag)->wait();
  const auto* p = h.data_ptr<std::int64_t>();
  const std::int64_t ndim = p[0];
  if (ndim < 0 || ndim > kMaxDims)
    throw PipelineError("stage " + std::to_string(src) + " sent a malformed tensor header");
  const std::int64_t dtype = p[kHeader - 1];
  if (dtype != static_cast<std::int64_t>(at::kFloat) && dtype != static_cast<std::int64_t>(at::kDouble) &&
      dtype != static_cast<std::int64_t>(at::kHalf) && dtype != static_cast<std::int64_t>(at::kBFloat16))
    throw PipelineError("stage " + std::to_string(src) + " sent a tensor of dtype code " + std::to_string(dtype) +
                        " (activations and gradients are floating point)");
  std::vector<std::int64_t> dims(p + 1, p + 1 + ndim);
  // Bytes so far, checked against the cap before each multiply so no product can overflow.
  std::int64_t bytes = static_cast<std::int64_t>(c10::elementSize(static_cast<at::ScalarType>(dtype)));
  for (auto d : dims) {
    if (d < 0) throw PipelineError("stage " + std::to_string(src) + " sent a negative dimension");
    if (d > 0 && bytes > options_.max_tensor_bytes / d)
      throw PipelineError("stage " + std::to_string(src) + " announced a tensor above max_tensor_bytes (" +
                          std::to_string(options_.max_tensor_bytes) + ")");
    bytes *= d;
  }
  at::Tensor t = at::empty(dims, at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype)));
  pg_->irecv(t, src, tag)->wait();
  return t;
}

void PipelineStage::reap_sends(bool all) {
  auto it = sends_.begin();
  for (; it != sends_.end(); ++it) {
    if (!all && !it->first->is_completed()) break;
    it->first->wait();
  }
  sends_.erase(sends_.begin(), it);
}

at::Tensor PipelineStage::run_piece(int chunk, const at::Tensor& x, std::vector<at::Tensor>* outs) {
  at::Tensor y = x;
  for (auto& child : *pieces_[chunk]) {
    y = child.forward(y);
    if (outs) outs->push_back(y);
  }
  return y;
}

void PipelineStage::run(const Action& a) {
  const int V = schedule_.virtual_stages();
  const int vs = schedule_.virtual_stage(stage(), a.chunk);
  const bool last = vs == V - 1;
  std::unique_ptr<Slot>& sp = slots_[a.mb * schedule_.chunks + a.chunk];
  if (!sp) sp = std::make_unique<Slot>();
  Slot& s = *sp;
  // A micro-batch is done here once its backward has run and its input gradient has gone.
  auto release_if_done = [&] {
    if (s.backward_done && !s.send_b.defined()) sp.reset();
  };
  switch (a.op) {
    case Op::RecvF: s.input = recv(schedule_.stage_of(vs - 1), tag_of(0, a.mb, vs, V)).requires_grad_(true); break;
    case Op::RecvB: s.grad = recv(schedule_.stage_of(vs + 1), tag_of(1, a.mb, vs, V)); break;
    case Op::SendF:
      send(s.send_f, schedule_.stage_of(vs + 1), tag_of(0, a.mb, vs + 1, V));
      s.send_f = at::Tensor();
      break;
    case Op::SendB:
      send(s.send_b, schedule_.stage_of(vs - 1), tag_of(1, a.mb, vs - 1, V));
      s.send_b = at::Tensor();
      release_if_done();
      break;
    case Op::F: {
      if (vs == 0) s.input = input_mbs_[a.mb];
      if (options_.recompute) {
        torch::NoGradGuard no_grad;
        at::Tensor out = run_piece(a.chunk, s.input, nullptr);
        if (last) loss_sum_ += (*loss_)(out, target_mbs_[a.mb]).item<double>() * sizes_[a.mb] / rows_;
        else s.send_f = out;
      } else {
        build_graph(s, a, last);
        if (last) loss_sum_ += s.root.item<double>();
        else s.send_f = s.root.detach();
      }
      peak_ = std::max(peak_, ++held_);
      break;
    }
    case Op::B: {
      build_graph(s, a, last);
      if (last) s.root.backward();
      else torch::autograd::backward({s.root}, {s.grad});
      if (vs > 0) s.send_b = input_gradient(s.input.grad(), s.input);
      --held_;
      s.backward_done = true;
      release_if_done();
      break;
    }
    case Op::I:
      build_graph(s, a, last);
      input_gradients(s, vs, last);
      break;
    case Op::W:
      weight_gradients(s, a.chunk);
      --held_;
      s.backward_done = true;
      release_if_done();
      break;
  }
}

void PipelineStage::build_graph(Slot& s, const Action& a, bool last) {
  if (s.root.defined()) return;
  s.outs.clear();
  at::Tensor out = run_piece(a.chunk, s.input, split_ ? &s.outs : nullptr);
  if (!split_) s.outs = {out};
  s.root = last ? (*loss_)(out, target_mbs_[a.mb]) * (static_cast<double>(sizes_[a.mb]) / rows_) : out;
}

// Gradients of the piece's input and of every child's output, the weights' left for W.
void PipelineStage::input_gradients(Slot& s, int vs, bool last) {
  std::vector<at::Tensor> wrt;
  const bool input_grad = vs > 0 || s.input.requires_grad();  // stage 0: only if the data asks for it
  if (input_grad) wrt.push_back(s.input);
  const std::size_t n = s.outs.size();
  std::vector<int> index(n, -1);
  for (std::size_t k = 0; k + 1 < n || (last && k < n); ++k)
    if (s.outs[k].requires_grad()) {
      index[k] = static_cast<int>(wrt.size());
      wrt.push_back(s.outs[k]);
    }
  std::vector<at::Tensor> g;
  if (!wrt.empty())
    g = torch::autograd::grad({s.root}, wrt, last ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{s.grad},
                              /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
  if (vs > 0) s.send_b = input_gradient(g[0], s.input);
  s.out_grads.assign(n, at::Tensor());
  for (std::size_t k = 0; k < n; ++k)
    if (index[k] >= 0) s.out_grads[k] = g[index[k]];
  if (!last && n > 0) s.out_grads[n - 1] = s.grad;
}

// Each child's weights' gradients from its output's gradient (I kept them), accumulated.
void PipelineStage::weight_gradients(Slot& s, int chunk) {
  std::size_t k = 0;
  for (auto& child : *pieces_[chunk]) {
    const at::Tensor& y = s.outs[k];
    const at::Tensor& gy = s.out_grads[k];
    ++k;
    if (!y.requires_grad() || !gy.defined()) continue;
    std::vector<at::Tensor> params;
    for (auto& p : child.ptr()->parameters())
      if (p.requires_grad()) params.push_back(p);
    if (params.empty()) continue;
    auto g = torch::autograd::grad({y}, params, {gy}, /*retain_graph=*/true, false, /*allow_unused=*/true);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!g[i].defined()) continue;
      at::Tensor& acc = params[i].mutable_grad();
      if (acc.defined()) acc.add_(g[i]);
      else acc = g[i].clone();
    }
  }
}

StepStats PipelineStage::step(const at::Tensor& inputs, const at::Tensor& targets, const LossFn& loss) {
  const double t0 = monotonic_us();
  StepStats st;
  const int m = schedule_.microbatches;
  timeline_.clear();
  held_ = peak_ = 0;
  loss_sum_ = 0;
  loss_ = &loss;
  slots_.clear();
  slots_.resize(static_cast<std::size_t>(m) * schedule_.chunks);
  const Action* current = nullptr;
  const int step_no = ++steps_;
  try {
    if (holds_first()) {
      if (!inputs.defined()) throw ArgumentError("the first stage needs the batch's inputs");
      rows_ = inputs.size(0);
      sizes_ = microbatch_sizes(rows_, m);
      input_mbs_ = inputs.split_with_sizes(sizes_);
    }
    if (holds_last()) {
      if (!targets.defined() || !loss) throw ArgumentError("the last stage needs the batch's targets and a loss");
      rows_ = targets.size(0);
      sizes_ = microbatch_sizes(rows_, m);
      target_mbs_ = targets.split_with_sizes(sizes_);
    }
    for (const Action& a : schedule_.actions[stage()]) {
      current = &a;
      TimedAction ta{a, monotonic_us(), 0};
      run(a);
      ta.end_us = monotonic_us();
      if (is_compute(a.op)) st.compute_s += (ta.end_us - ta.start_us) * 1e-6;
      timeline_.push_back(ta);
      reap_sends(false);
    }
    current = nullptr;
    reap_sends(true);
  } catch (const std::exception& e) {
    const std::string where = "pipeline stage " + std::to_string(stage()) + " (step " + std::to_string(step_no) +
                              (current ? ", at " + to_string(*current) : std::string()) + "): " + e.what();
    pg_->abort(where);
    slots_.clear();
    sends_.clear();
    throw PipelineError(where + " (ranks of the pipeline group are its stages)");
  }
  slots_.clear();
  input_mbs_.clear();
  target_mbs_.clear();
  loss_ = nullptr;
  st.peak_activations = peak_;
  if (holds_last()) st.loss = loss_sum_;
  st.wall_s = (monotonic_us() - t0) * 1e-6;
  return st;
}

at::Tensor PipelineStage::forward(const at::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  const int V = schedule_.virtual_stages();
  std::vector<at::Tensor> mbs;
  if (holds_first()) {
    if (!inputs.defined()) throw ArgumentError("the first stage needs the inputs");
    const std::int64_t rows = inputs.size(0);
    mbs = inputs.split_with_sizes(
        microbatch_sizes(rows, static_cast<int>(std::min<std::int64_t>(schedule_.microbatches, rows))));
  }
  // Micro-batch counts can differ from the schedule's (a test set's last batch): the first
  // stage tells the others how many follow.
  at::Tensor count = at::zeros({1}, at::kLong);
  const int eval_tag = tag_of(0, 0, 0, V) + (1 << 29);
  std::vector<at::Tensor> outs;
  try {
    if (holds_first()) count.fill_(static_cast<std::int64_t>(mbs.size()));
    for (int vs = 0; vs < V; ++vs) {
      const int s = schedule_.stage_of(vs), c = schedule_.chunk_of(vs);
      if (vs > 0 && s == stage() && schedule_.stage_of(vs - 1) != stage()) {
        pg_->irecv(count, schedule_.stage_of(vs - 1), eval_tag)->wait();
      }
      if (s != stage()) continue;
      const int n = static_cast<int>(count.item<std::int64_t>());
      if (vs > 0 && static_cast<int>(mbs.size()) != n) {
        mbs.clear();
        for (int j = 0; j < n; ++j) mbs.push_back(recv(schedule_.stage_of(vs - 1), tag_of(0, j, vs, V)));
      }
      for (auto& x : mbs) x = run_piece(c, x, nullptr);
      if (vs == V - 1) {
        outs = mbs;
      } else if (schedule_.stage_of(vs + 1) != stage()) {
        pg_->send(count, schedule_.stage_of(vs + 1), eval_tag);
        for (int j = 0; j < n; ++j) send(mbs[j], schedule_.stage_of(vs + 1), tag_of(0, j, vs + 1, V));
        mbs.clear();
      }
    }
    reap_sends(true);
  } catch (const std::exception& e) {
    const std::string where = "pipeline stage " + std::to_string(stage()) + " (evaluation): " + e.what();
    pg_->abort(where);
    sends_.clear();
    throw PipelineError(where);
  }
  return outs.empty() ? at::Tensor() : at::cat(outs);
}

std::vector<torch::nn::Sequential> split_sequential(torch::nn::Sequential model, const std::vector<std::string>& cuts) {
  const auto named = model->named_children();
  std::vector<torch::nn::Sequential> pieces(1);
  std::size_t next_cut = 0;
  auto child = model->begin();
  for (std::size_t i = 0; i < named.size(); ++i, ++child) {
    const std::string& name = named[i].key();
    if (next_cut < cuts.size() && name == cuts[next_cut]) {
      if (i == 0) throw ArgumentError("split_sequential: cut '" + name + "' is the first child (an empty piece)");
      pieces.emplace_back();
      ++next_cut;
    }
    pieces.back()->push_back(name, *child);
  }
  if (next_cut < cuts.size()) {
    std::string names;
    for (const auto& n : named) names += (names.empty() ? "" : ", ") + n.key();
    throw ArgumentError("split_sequential: cut '" + cuts[next_cut] +
                        "' is not a child after the previous cut (children in order: " + names + ")");
  }
  return pieces;
}

std::vector<std::string> balanced_cuts(torch::nn::Sequential model, const std::vector<double>& cost, int k) {
  const auto named = model->named_children();
  const int n = static_cast<int>(named.size());
  if (static_cast<int>(cost.size()) != n) throw ArgumentError("balanced_cuts: one cost per child");
  if (k < 1 || k > n)
    throw ArgumentError("balanced_cuts: " + std::to_string(k) + " pieces of " + std::to_string(n) + " children");
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[j][i]: the smallest possible largest part when the first i children make j parts.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> from(k + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int j = 1; j <= k; ++j)
    for (int i = j; i <= n; ++i)
      for (int c = j - 1; c < i; ++c) {
        const double v = std::max(best[j - 1][c], prefix[i] - prefix[c]);
        if (v < best[j][i]) {
          best[j][i] = v;
          from[j][i] = c;
        }
      }
  std::vector<std::string> cuts;
  for (int j = k, i = n; j > 1; --j) {
    i = from[j][i];
    cuts.insert(cuts.begin(), named[i].key());
  }
  return cuts;
}

std::vector<double> measure_child_costs(torch::nn::Sequential model, const at::Tensor& sample, int repeats) {
  // Buffers (batch-norm statistics) and gradients are put back as they were.
  std::vector<std::pair<at::Tensor, at::Tensor>> buffers;
  for (auto& b : model->buffers()) buffers.emplace_back(b, b.clone());
  std::vector<std::vector<double>> times(model->size());
  for (int r = 0; r < repeats; ++r) {
    at::Tensor x = sample;
    std::size_t i = 0;
    for (auto& child : *model) {
      at::Tensor in = x.detach().requires_grad_(x.is_floating_point());
      const double t0 = monotonic_us();
      at::Tensor y = child.forward(in);
      if (y.requires_grad()) y.backward(at::ones_like(y));
      times[i++].push_back(monotonic_us() - t0);
      x = y.detach();
    }
  }
  for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  {
    torch::NoGradGuard no_grad;
    for (auto& [b, saved] : buffers) b.copy_(saved);
  }
  std::vector<double> out;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    out.push_back(t[t.size() / 2]);
  }
  return out;
}

}  // namespace distrl::training::pipeline
