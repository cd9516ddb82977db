// The backward parts of one worker's engine (the context table and the hooks are in
// contexts.cpp), the parameter guards' notices, and the gradient-hook API of context.h.
#include "autograd/detail/engine.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include "autograd/context.h"
#include "common/error.h"
#include "common/log.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::autograd::detail {
namespace {

using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;

// The backward part running its leaves' hooks on this thread (see context.h: part_gradient).
struct PartScope {
  ContextState* state;
  std::vector<std::function<void()>> callbacks;
};
thread_local PartScope* t_part = nullptr;

std::string describe_tensor(c10::ScalarType t, const std::vector<std::int64_t>& sizes) {
  std::ostringstream o;
  o << c10::toString(t) << "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) o << (i ? ", " : "") << sizes[i];
  o << "]";
  return o.str();
}

}  // namespace

transport::Future<void> all_or_first_error(const std::vector<transport::Future<void>>& fs) {
  transport::Promise<void> p;
  auto out = p.get_future();
  auto left = std::make_shared<std::atomic<std::size_t>>(fs.size());
  auto done = std::make_shared<std::atomic<bool>>(false);
  for (const auto& f : fs) {
    // On the completing thread (the I/O thread, for a gradient's acknowledgement): counting
    // costs no hand-off, and what waits on the result still runs on the pool.
    f.on_done_inline([p, left, done, f](transport::Executor* executor) {
      if (f.error()) {
        if (!done->exchange(true)) p.set_error(f.error(), executor);
        return;
      }
      if (left->fetch_sub(1) == 1 && !done->exchange(true)) p.set_value(executor);
    });
  }
  return out;
}

variable_list RecvBackward::apply(variable_list&&) {
  throw Error("a tensor received over RPC in distributed-autograd context " + id_name(ctx) +
              " reached a local backward(): run dist_autograd::backward(ctx, roots) instead");
}

// ---------------------------------------------------------------- guards

void Engine::add_guard(const std::shared_ptr<ParameterGuard>& guard) {
  std::lock_guard<std::mutex> lock(guards_mu_);
  guards_.erase(std::remove_if(guards_.begin(), guards_.end(), [](auto& w) { return w.expired(); }), guards_.end());
  guards_.push_back(guard);
}

std::vector<std::shared_ptr<ParameterGuard>> Engine::guards_for(const std::vector<at::Tensor>& params) {
  std::vector<std::shared_ptr<ParameterGuard>> out;
  std::lock_guard<std::mutex> lock(guards_mu_);
  for (auto& w : guards_) {
    auto g = w.lock();
    if (!g) continue;
    for (auto& p : params)
      if (g->guards(p)) {
        out.push_back(g);
        break;
      }
  }
  return out;
}

std::vector<std::int64_t> Engine::guard_waits() const {
  std::vector<std::int64_t> out;
  std::lock_guard<std::mutex> lock(guards_mu_);
  for (auto& w : guards_)
    if (auto g = w.lock()) g->waits(&out);
  return out;
}

std::vector<std::int64_t> Engine::guard_waits_everywhere() {
  std::vector<std::int64_t> out = guard_waits();
  auto none = make_current(-1);
  std::vector<transport::Future<std::vector<std::int64_t>>> asked;
  for (int r = 0; r < agent_.world_size(); ++r)
    if (r != rank_ && !agent_.connection_lost(r))  // bounded: a stopped peer must not hold the guard's wait
      asked.push_back(
          agent_.rpc_async<std::vector<std::int64_t>>(transport::Target(r, std::chrono::seconds(1)), kWaitsFn));
  for (auto& f : asked) {
    try {
      auto theirs = f.value();
      out.insert(out.end(), theirs.begin(), theirs.end());
    } catch (const std::exception&) {
      // gone or slow: its waits cannot close a cycle that the others see whole
    }
  }
  return out;
}

void Engine::notify_released(const std::vector<std::int64_t>& ids) {
  std::vector<std::shared_ptr<ParameterGuard>> live;
  {
    std::lock_guard<std::mutex> lock(guards_mu_);
    for (auto& w : guards_)
      if (auto g = w.lock()) live.push_back(std::move(g));
  }
  for (auto& g : live)
    for (auto id : ids) g->released(id);
}

// ---------------------------------------------------------------- backward

namespace {

// An output of a part: a leaf's accumulator, or one input of a received message's node.
struct Out {
  NodePtrOf<RecvBackward> recv;  // null: a leaf
  torch::autograd::AccumulateGrad* leaf = nullptr;
  std::uint32_t input = 0;
};
// What goes back over the wire: per received message, its frames and their gradients.
struct Back {
  NodePtrOf<RecvBackward> recv;
  std::vector<std::uint32_t> frames;
  std::vector<at::Tensor> grads;
};

// Every leaf accumulator and received-message input the roots reach: the local engine captures
// the gradient flowing into each instead of running the node.
std::vector<Out> outputs_of(const edge_list& roots, edge_list* outputs) {
  std::vector<Out> outs;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const auto& e : roots)
    if (e.is_valid() && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(n)) {
      outputs->emplace_back(share_node(acc), 0);
      outs.push_back(Out{nullptr, acc, 0});
      continue;
    }
    if (auto* recv = dynamic_cast<RecvBackward*>(n)) {
      auto keep = share_node(recv);
      for (std::uint32_t i = 0; i < recv->num_inputs(); ++i) {
        outputs->emplace_back(keep, i);
        outs.push_back(Out{keep, nullptr, i});
      }
      continue;
    }
    for (const auto& e : n->next_edges())
      if (e.is_valid() && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
  }
  return outs;
}

// As the local engine would for a leaf: the accumulator's pre hooks, the leaf's tensor hooks
// (Tensor::register_hook; AccumulateGrad::apply runs them), accumulate (here: into the
// context), then the accumulator's post hooks (DDP's gradient-ready hooks).
// LibTorch 2.x keeps a leaf's tensor hooks as the accumulator's tensor_pre_hooks() and its engine
// runs them on a gradient it captures for us; 1.x left them to AccumulateGrad::apply.
template <class N, class = void>
struct EngineRunsTensorHooks : std::false_type {};
template <class N>
struct EngineRunsTensorHooks<N, std::void_t<decltype(std::declval<N&>().tensor_pre_hooks())>> : std::true_type {};

void accumulate_leaf(ContextState& state, torch::autograd::AccumulateGrad& leaf, at::Tensor g) {
  const at::Tensor& var = leaf.variable;
  variable_list in{std::move(g)};
  for (const auto& hook : leaf.pre_hooks()) in = (*hook)(in);
  if constexpr (!EngineRunsTensorHooks<torch::autograd::Node>::value)
    for (const auto& hook : torch::autograd::impl::hooks(var)) in = (*hook)(in);
  if (!in.at(0).defined()) return;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    auto& slot = state.grads[var.unsafeGetTensorImpl()];
    if (slot.second.defined()) slot.second = slot.second + in.at(0);
    else slot = {var, in.at(0).detach().clone()};
  }
  for (const auto& hook : leaf.post_hooks()) (*hook)(variable_list{}, in);
}

}  // namespace

transport::Future<void> Engine::run_part(const std::shared_ptr<ContextState>& state, const edge_list& roots,
                                         const variable_list& grads) {
  parts_.fetch_add(1, std::memory_order_relaxed);
  std::vector<Back> back;
  {
    std::lock_guard<std::mutex> exec(state->exec_mu);
    edge_list outputs;
    const std::vector<Out> outs = outputs_of(roots, &outputs);
    if (outputs.empty()) return transport::Future<void>::ready();
    variable_list got;
    try {
      got = torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/true,
                                                                  /*create_graph=*/false, /*accumulate_grad=*/false,
                                                                  outputs);
    } catch (const std::exception& e) {
      failed_parts_.fetch_add(1);
      throw Error("the local backward of " + describe(state->id) + " failed: " + e.what());
    }
    std::map<RecvBackward*, std::size_t> back_of;
    PartScope scope{state.get(), {}};
    PartScope* outer = std::exchange(t_part, &scope);
    struct Restore {
      PartScope* outer;
      ~Restore() { t_part = outer; }
    } restore{outer};
    for (std::size_t k = 0; k < outs.size(); ++k) {
      if (!got[k].defined()) continue;
      const Out& o = outs[k];
      if (o.leaf) {
        accumulate_leaf(*state, *o.leaf, got[k]);
        continue;
      }
      auto [it, fresh] = back_of.emplace(o.recv.get(), back.size());
      if (fresh) back.push_back(Back{o.recv, {}, {}});
      back[it->second].frames.push_back(o.recv->frames.at(o.input));
      back[it->second].grads.push_back(got[k].detach());
    }
    // The callbacks hooks queued (DDP's end of backward), as the local engine runs its final
    // callbacks: after every leaf of this part.
    for (std::size_t i = 0; i < scope.callbacks.size(); ++i) {
      try {
        scope.callbacks[i]();
      } catch (const std::exception& e) {
        failed_parts_.fetch_add(1);
        throw Error("a gradient callback of " + describe(state->id) + " failed: " + e.what());
      }
    }
  }
  if (back.empty()) return transport::Future<void>::ready();
  std::vector<transport::Future<void>> sent;
  {
    auto none = make_current(-1);  // gradients are sent outside the context: nothing to record
    for (auto& b : back)
      sent.push_back(agent_.rpc_async<void>(b.recv->src, kGradsFn, state->id, b.recv->msg, b.frames, b.grads));
  }
  auto self = shared_from_this();
  const std::int64_t id = state->id;
  return all_or_first_error(sent).then_inline([self, id](const transport::Future<void>& f) {
    try {
      f.value();
    } catch (const std::exception& e) {
      self->failed_parts_.fetch_add(1);
      throw BackwardError(self->describe(id) + ": " + e.what());
    }
  });
}

transport::Future<void> Engine::on_gradients(std::int64_t ctx, std::int64_t msg,
                                             const std::vector<std::uint32_t>& frames,
                                             const std::vector<at::Tensor>& grads) {
  auto s = find(ctx);
  if (!s) {
    refuse_if_gone(ctx, "gradients");
    throw ProtocolError("gradients for unknown distributed-autograd context " + id_name(ctx) + " on " + agent_.name() +
                        " (never seen here)");
  }
  if (frames.size() != grads.size())
    throw ProtocolError("gradients for " + describe(ctx) + ": " + std::to_string(frames.size()) +
                        " frame numbers but " + std::to_string(grads.size()) + " gradients");
  edge_list roots;
  variable_list in;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->sends.find(msg);
    if (it == s->sends.end())
      throw ProtocolError("gradients for unknown autograd message " + id_name(msg) + " in " + describe(ctx));
    const SendRecord& rec = it->second;
    roots = rec.edges;
    in.assign(rec.edges.size(), at::Tensor());
    for (std::size_t i = 0; i < frames.size(); ++i) {
      auto pos = std::find(rec.frames.begin(), rec.frames.end(), frames[i]);
      if (pos == rec.frames.end())
        throw ProtocolError("gradients for " + describe(ctx) + ": message " + id_name(msg) +
                            " sent no tensor that requires grad in frame " + std::to_string(frames[i]));
      const std::size_t k = static_cast<std::size_t>(pos - rec.frames.begin());
      const at::Tensor& g = grads[i];
      if (g.scalar_type() != rec.dtypes[k] || g.sizes().vec() != rec.sizes[k])
        throw ProtocolError("gradient for frame " + std::to_string(frames[i]) + " of message " + id_name(msg) + " in " +
                            describe(ctx) + " is " + describe_tensor(g.scalar_type(), g.sizes().vec()) +
                            ", the tensor sent was " + describe_tensor(rec.dtypes[k], rec.sizes[k]));
      in[k] = in[k].defined() ? in[k] + g : g;
    }
  }
  return run_part(s, roots, in);
}

}  // namespace distrl::autograd::detail

namespace distrl::autograd {

bool in_backward_part() { return detail::t_part != nullptr; }

namespace {
detail::PartScope& current_part(const char* fn) {
  if (!detail::t_part)
    throw Error(std::string("dist_autograd::") + fn +
                ": no backward part runs on this thread (call it from a gradient hook)");
  return *detail::t_part;
}
}  // namespace

std::int64_t part_context() { return current_part("part_context").state->id; }

std::string context_name(std::int64_t id) { return detail::id_name(id); }

at::Tensor part_gradient(const at::Tensor& leaf) {
  auto& part = current_part("part_gradient");
  std::lock_guard<std::mutex> lock(part.state->mu);
  auto it = part.state->grads.find(leaf.unsafeGetTensorImpl());
  return it == part.state->grads.end() ? at::Tensor() : it->second.second;
}

void set_part_gradient(const at::Tensor& leaf, const at::Tensor& grad) {
  auto& part = current_part("set_part_gradient");
  std::lock_guard<std::mutex> lock(part.state->mu);
  part.state->grads[leaf.unsafeGetTensorImpl()] = {leaf, grad};
}

void queue_part_callback(std::function<void()> fn) {
  current_part("queue_part_callback").callbacks.push_back(std::move(fn));
}

}  // namespace distrl::autograd
