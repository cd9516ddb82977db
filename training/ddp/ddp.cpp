#include "training/ddp/ddp.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <utility>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <mutex>
#include <unordered_set>

#include "autograd/context.h"
#include "common/error.h"

namespace distrl::training {

using transport::ReduceOp;
using transport::WorkPtr;
using Clock = std::chrono::steady_clock;

namespace {
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Root 0's values of ts on every rank, in one broadcast per dtype rather than one per tensor
// (as torch's _broadcast_coalesced): DDP syncs every buffer before each forward, and each
// broadcast is a round of messages.
void broadcast_coalesced(transport::ProcessGroup& pg, const std::vector<torch::Tensor>& ts) {
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& t : ts)
    if (t.numel() > 0) by_type[t.scalar_type()].push_back(t);
  for (auto& [type, group] : by_type) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : group) flat.push_back(t.reshape(-1));
    torch::Tensor all = group.size() == 1 ? flat[0].contiguous() : torch::cat(flat);
    pg.broadcast(all, 0);
    std::int64_t off = 0;
    for (auto& t : group) {
      t.copy_(all.narrow(0, off, t.numel()).view_as(t));
      off += t.numel();
    }
  }
}
}  // namespace

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<int> params;            // indices into Reducer::params
    std::vector<std::int64_t> offsets;  // element offset of each in flat
    torch::Tensor flat;
    int pending = 0;
    WorkPtr work;
    Clock::time_point launched;
  };
  struct Slot {
    int bucket = 0;
    int index = 0;  // within the bucket
  };

  // Fires after a parameter's gradient was accumulated into .grad.
  class Hook final : public torch::autograd::FunctionPostHook {
   public:
    Hook(Reducer* r, int param) : r_(r), param_(param) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      r_->on_grad_ready(param_);
      return outputs;
    }

   private:
    Reducer* r_;
    int param_;
  };

  DistributedDataParallel& ddp;
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  // Kept alive, or hooks vanish. std::shared_ptr<Node> in LibTorch 1.x, c10::intrusive_ptr in 2.x.
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators;
  std::vector<std::uintptr_t> hook_keys;
  std::vector<Bucket> buckets;
  std::vector<Slot> slots;

  std::mutex mu;  // autograd may run hooks on several threads
  std::vector<bool> ready;
  std::vector<bool> unused;  // find_unused_parameters: not reached from the last forward's output
  bool in_backward = false;
  bool distributed = false;           // this backward is a distributed-autograd part: gradients live in its context
  std::int64_t reduced_context = -1;  // the distributed-autograd context last reduced
  int next_launch = 0;
  Clock::time_point backward_start;
  DdpStats stats;

  explicit Reducer(DistributedDataParallel& d) : ddp(d) {
    for (auto& np : ddp.module_->named_parameters()) {
      if (!np.value().requires_grad()) continue;
      params.push_back(np.value());
      names.push_back(np.key());
    }
    if (params.empty()) throw ArgumentError("DDP: the module has no parameters that require gradients");
    build_buckets();
    ready.assign(params.size(), false);
    unused.assign(params.size(), false);
    for (std::size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      hook_keys.push_back(acc->add_post_hook(std::make_unique<Hook>(this, static_cast<int>(i))));
      accumulators.push_back(std::move(acc));
    }
  }

  ~Reducer() {
    for (std::size_t i = 0; i < accumulators.size(); ++i) accumulators[i]->del_post_hook(hook_keys[i]);
    for (auto& b : buckets)
      if (b.work) try {
          b.work->wait();
        } catch (...) {}
  }

  // Reverse registration order, one dtype and device per bucket, about cap bytes each.
  void build_buckets() {
    const auto cap = static_cast<std::int64_t>(ddp.options_.bucket_cap_mb * 1024 * 1024);
    const auto first_cap = std::min(cap, static_cast<std::int64_t>(ddp.options_.first_bucket_cap_mb * 1024 * 1024));
    slots.resize(params.size());
    for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
      const auto& p = params[i];
      const std::int64_t bytes = p.numel() * static_cast<std::int64_t>(p.element_size());
      bool fresh = buckets.empty();
      if (!fresh) {
        const auto& b = buckets.back();
        const auto& first = params[b.params[0]];
        const std::int64_t used = b.offsets.empty() ? 0
                                                    : (b.offsets.back() + params[b.params.back()].numel()) *
                                                          static_cast<std::int64_t>(first.element_size());
        fresh = first.scalar_type() != p.scalar_type() || first.device() != p.device() ||
                used + bytes > (buckets.size() == 1 ? first_cap : cap);
      }
      if (fresh) buckets.emplace_back();
      auto& b = buckets.back();
      const std::int64_t off = b.offsets.empty() ? 0 : b.offsets.back() + params[b.params.back()].numel();
      slots[i] = Slot{static_cast<int>(buckets.size()) - 1, static_cast<int>(b.params.size())};
      b.params.push_back(i);
      b.offsets.push_back(off);
    }
    for (auto& b : buckets) {
      const auto& last = params[b.params.back()];
      b.flat = torch::zeros({b.offsets.back() + last.numel()}, last.options().requires_grad(false));
    }
  }

  void start_iteration() {  // mu held; first hook of a synchronised backward
    distributed = autograd::in_backward_part();
    if (distributed) claim_context();
    in_backward = true;
    backward_start = Clock::now();
    next_launch = 0;
    std::fill(ready.begin(), ready.end(), false);
    for (auto& b : buckets) b.pending = static_cast<int>(b.params.size());
    if (distributed) autograd::queue_part_callback([this] { finish(); });
    else torch::autograd::Engine::get_default_engine().queue_callback([this] { finish(); });
    for (std::size_t i = 0; i < params.size(); ++i)
      if (unused[i]) mark_ready(static_cast<int>(i));
  }

  // Inside distributed autograd each backward part that reaches these parameters would run its
  // own reduction: ranks whose parts differ in number would mismatch their collectives, and a
  // second reduction would average an average. So one reduction per context, and a second
  // part of it is refused (before any collective, so the ranks stay in step).
  void claim_context() {
    const std::int64_t ctx = autograd::part_context();
    if (ctx == reduced_context)
      throw Error("DDP inside distributed autograd: a second backward part of context " + autograd::context_name(ctx) +
                  " reached the module's parameters on rank " + std::to_string(ddp.pg_->rank()) +
                  "; DDP reduces once per context, so each rank's backward must reach the module in one part: send "
                  "the module's output over RPC at most once per context, and run one backward per context");
    reduced_context = ctx;
  }

  void on_grad_ready(int i) {
    if (!ddp.sync_) return;
    std::lock_guard<std::mutex> lock(mu);
    if (!in_backward) start_iteration();
    if (!ready[i]) mark_ready(i);
  }

  void mark_ready(int i) {  // mu held
    ready[i] = true;
    const Slot s = slots[i];
    auto& b = buckets[s.bucket];
    auto view = b.flat.narrow(0, b.offsets[s.index], params[i].numel());
    const at::Tensor g = distributed ? autograd::part_gradient(params[i]) : params[i].grad();
    torch::NoGradGuard no_grad;
    if (g.defined()) view.copy_(g.reshape(-1));
    else view.zero_();
    if (--b.pending == 0) launch_ready();
  }

  void launch_ready() {  // in bucket order, so every rank issues the same sequence
    while (next_launch < static_cast<int>(buckets.size()) && buckets[next_launch].pending == 0) {
      auto& b = buckets[next_launch++];
      b.launched = Clock::now();
      b.work = ddp.pg_->all_reduce_async(b.flat, ReduceOp::Avg);
    }
  }

  // End of backward: every bucket must have launched; wait and write the averages back.
  void finish() {
    std::lock_guard<std::mutex> lock(mu);
    in_backward = false;
    stats = DdpStats{};
    stats.backward_s = seconds_since(backward_start);
    stats.buckets = static_cast<int>(buckets.size());
    if (next_launch < static_cast<int>(buckets.size())) {
      std::string missing;
      int count = 0;
      for (std::size_t i = 0; i < params.size(); ++i)
        if (!ready[i] && count++ < 8) missing += (missing.empty() ? "" : ", ") + names[i];
      for (int k = 0; k < next_launch; ++k) buckets[k].work->wait();  // leave the group in step
      throw ArgumentError("DDP: " + std::to_string(count) + " parameter(s) got no gradient in this backward pass (" +
                          missing +
                          "); construct DDP with find_unused_parameters = true, or make every parameter "
                          "take part in the loss");
    }
    const auto wait_start = Clock::now();
    torch::NoGradGuard no_grad;
    for (auto& b : buckets) {
      b.work->wait();
      stats.comm_s += seconds_since(b.launched);
      b.work.reset();
      for (std::size_t k = 0; k < b.params.size(); ++k) {
        auto& p = params[b.params[k]];
        auto view = b.flat.narrow(0, b.offsets[k], p.numel()).view(p.sizes());
        if (distributed) {
          autograd::set_part_gradient(p, view.clone());
          continue;
        }
        auto& g = p.mutable_grad();
        if (g.defined()) g.copy_(view);
        else g = view.clone();
      }
    }
    stats.wait_s = seconds_since(wait_start);
  }

  void find_unused(const std::vector<torch::Tensor>& outputs) {
    std::unordered_set<torch::autograd::Node*> seen;
    std::vector<torch::autograd::Node*> stack;
    for (const auto& o : outputs)
      if (o.defined() && o.grad_fn()) stack.push_back(o.grad_fn().get());
    while (!stack.empty()) {
      auto* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (const auto& e : n->next_edges())
        if (e.function) stack.push_back(e.function.get());
    }
    std::lock_guard<std::mutex> lock(mu);
    for (std::size_t i = 0; i < params.size(); ++i) unused[i] = !seen.count(accumulators[i].get());
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<models::Net> module,
                                                 std::shared_ptr<transport::ProcessGroup> pg, DdpOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  if (!module_) throw ArgumentError("DDP: no module");
  if (!pg_) throw ArgumentError("DDP: no process group (this rank is not a member?)");
  if (!(options_.bucket_cap_mb > 0) || !(options_.first_bucket_cap_mb > 0))
    throw ArgumentError("DDP: bucket_cap_mb and first_bucket_cap_mb must be positive");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> state = module_->parameters();
  for (auto& b : module_->buffers()) state.push_back(b);
  broadcast_coalesced(*pg_, state);
  reducer_ = std::make_unique<Reducer>(*this);
}

DistributedDataParallel::~DistributedDataParallel() = default;

torch::Tensor DistributedDataParallel::forward(const torch::Tensor& x) {
  if (options_.broadcast_buffers && pg_->size() > 1) {
    torch::NoGradGuard no_grad;
    broadcast_coalesced(*pg_, module_->buffers());
  }
  auto out = module_->forward(x);
  if (options_.find_unused_parameters && sync_ && torch::GradMode::is_enabled()) prepare_for_backward({out});
  return out;
}

void DistributedDataParallel::prepare_for_backward(const std::vector<torch::Tensor>& outputs) {
  if (options_.find_unused_parameters) reducer_->find_unused(outputs);
}

std::vector<std::vector<int>> DistributedDataParallel::buckets() const {
  std::vector<std::vector<int>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.params);
  return out;
}

DdpStats DistributedDataParallel::last_stats() const {
  std::lock_guard<std::mutex> lock(reducer_->mu);
  return reducer_->stats;
}

}  // namespace distrl::training
