#include "autograd/detail/engine.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <sstream>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include "autograd/context.h"
#include "common/error.h"
#include "common/log.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/tensor.h"

namespace distrl::autograd::detail {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;

constexpr std::size_t kReleasedMemory = 1 << 16;

// The current context of this thread, per engine (a stack: contexts nest, handlers enter).
struct Current {
  const Engine* engine;
  std::int64_t ctx;
};
thread_local std::vector<Current> t_current;

// The backward part running its leaves' hooks on this thread (see context.h: part_gradient).
struct PartScope {
  ContextState* state;
  std::vector<std::function<void()>> callbacks;
};
thread_local PartScope* t_part = nullptr;

std::string ctx_name(std::int64_t id) {
  return std::to_string(id >> 48) + ":" + std::to_string(id & ((std::int64_t{1} << 48) - 1));
}

std::string describe_tensor(c10::ScalarType t, const std::vector<std::int64_t>& sizes) {
  std::ostringstream o;
  o << c10::toString(t) << "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) o << (i ? ", " : "") << sizes[i];
  o << "]";
  return o.str();
}

// Completes when every future has, or at the first error (a dead peer on one branch fails the
// part at once, without waiting for the others).
transport::Future<void> all_or_first_error(const std::vector<transport::Future<void>>& fs) {
  transport::Promise<void> p;
  auto out = p.get_future();
  auto left = std::make_shared<std::atomic<std::size_t>>(fs.size());
  auto done = std::make_shared<std::atomic<bool>>(false);
  for (const auto& f : fs) {
    f.then([p, left, done](const transport::Future<void>& r) {
      if (r.error()) {
        if (!done->exchange(true)) p.set_error(r.error());
        return;
      }
      if (left->fetch_sub(1) == 1 && !done->exchange(true)) p.set_value();
    });
  }
  return out;
}

}  // namespace

variable_list RecvBackward::apply(variable_list&&) {
  throw Error("a tensor received over RPC in distributed-autograd context " + ctx_name(ctx) +
              " reached a local backward(): run dist_autograd::backward(ctx, roots) instead");
}

Engine::Engine(transport::RpcAgent& agent, const AutogradOptions& options)
    : agent_(agent), rank_(agent.rank()), options_(options) {}

std::string Engine::describe(std::int64_t ctx) const {
  return "context " + ctx_name(ctx) + " on " + agent_.name();
}

// ---------------------------------------------------------------- contexts

std::shared_ptr<ContextState> Engine::add_locked(std::int64_t id) {
  if (contexts_.size() >= options_.max_live_contexts)
    throw ProtocolError("distributed autograd on " + agent_.name() + " holds " + std::to_string(contexts_.size()) +
                        " live contexts, its max_live_contexts: refusing context " + ctx_name(id) +
                        " (are contexts left? raise AutogradOptions::max_live_contexts in dist_autograd::enable)");
  auto s = std::make_shared<ContextState>(id);
  contexts_[id] = s;
  return s;
}

std::shared_ptr<ContextState> Engine::drop_locked(std::int64_t id) {
  std::shared_ptr<ContextState> s;
  auto it = contexts_.find(id);
  if (it != contexts_.end()) {
    s = std::move(it->second);
    contexts_.erase(it);
  }
  if (released_.insert(id).second) {
    released_order_.push_back(id);
    if (released_order_.size() > kReleasedMemory) {
      released_.erase(released_order_.front());
      released_order_.pop_front();
    }
  }
  return s;
}

std::shared_ptr<ContextState> Engine::create() {
  const std::int64_t id = (static_cast<std::int64_t>(rank_) << 48) | next_ctx_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  return add_locked(id);
}

std::shared_ptr<ContextState> Engine::find(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : it->second;
}

std::shared_ptr<ContextState> Engine::get_or_create(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(id);
  if (it != contexts_.end()) return it->second;
  if (released_.count(id)) return nullptr;  // a late message cannot bring it back
  return add_locked(id);
}

std::size_t Engine::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return contexts_.size();
}

EngineStats Engine::stats() const {
  return EngineStats{parts_.load(), failed_parts_.load(), sends_.load(), recvs_.load()};
}

std::shared_ptr<void> Engine::make_current(std::int64_t ctx) {
  t_current.push_back(Current{this, ctx});
  return std::shared_ptr<void>(nullptr, [](void*) { t_current.pop_back(); });
}

transport::Future<void> Engine::release(std::int64_t id) {
  std::shared_ptr<ContextState> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = drop_locked(id);
  }
  notify_released({id});
  if (!s) return transport::Future<void>::ready();
  std::set<int> peers;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    peers = s->peers;
  }
  std::vector<transport::Future<void>> acks;
  auto none = make_current(-1);
  for (int p : peers) {
    if (p == rank_ || agent_.connection_lost(p)) continue;
    acks.push_back(agent_.rpc_async<void>(p, kReleaseFn, id));
  }
  if (acks.empty()) return transport::Future<void>::ready();
  auto self = shared_from_this();
  return all_or_first_error(acks).then([self, id](const transport::Future<void>& f) {
    try {
      f.value();
    } catch (const std::exception& e) {
      DISTRL_LOG(Debug, "dist_autograd: release of " << self->describe(id) << " not acknowledged everywhere: " << e.what());
    }
  });
}

void Engine::on_peer_down(int rank, const std::string& why) {
  // Contexts a dead worker created will never be released by it: reap them.
  std::vector<std::int64_t> reap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, s] : contexts_)
      if ((id >> 48) == rank) reap.push_back(id);
  }
  if (reap.empty()) return;
  DISTRL_LOG(Info, "dist_autograd: " << agent_.name() << " reaps " << reap.size() << " context(s) of rank " << rank
                                     << " (" << why << ")");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto id : reap) drop_locked(id);
  }
  notify_released(reap);
}

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

// ---------------------------------------------------------------- hooks

std::int64_t Engine::current_context() {
  for (auto it = t_current.rbegin(); it != t_current.rend(); ++it)
    if (it->engine == this) return it->ctx;
  return -1;
}

std::shared_ptr<void> Engine::enter(std::int64_t ctx, int src) {
  if (!get_or_create(ctx)) return nullptr;  // released already: the handler runs outside it
  return make_current(ctx);
}

void Engine::on_send(std::int64_t ctx, int dest, const std::vector<transport::OutFrame>& frames,
                     transport::MessageTag* tag) {
  auto s = get_or_create(ctx);
  if (!s) return;
  SendRecord rec;
  rec.dest = dest;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (!frames[i].tensor) continue;
    const at::Tensor& t = *frames[i].tensor;
    if (!t.requires_grad()) continue;
    rec.frames.push_back(static_cast<std::uint32_t>(i + 1));
    rec.edges.push_back(torch::autograd::impl::gradient_edge(t));
    rec.sizes.push_back(t.sizes().vec());
    rec.dtypes.push_back(t.scalar_type());
  }
  std::lock_guard<std::mutex> lock(s->mu);
  s->peers.insert(dest);
  if (rec.frames.empty()) return;
  const std::int64_t msg = (static_cast<std::int64_t>(rank_) << 48) | next_msg_.fetch_add(1);
  tag->msg = msg;
  tag->grad_frames = rec.frames;
  s->sends.emplace(msg, std::move(rec));
  sends_.fetch_add(1, std::memory_order_relaxed);
}

at::Tensor Engine::on_receive(const transport::MessageTag& tag, int src, std::uint32_t frame, at::Tensor t) {
  auto s = get_or_create(tag.ctx);
  if (!s) return t;
  std::lock_guard<std::mutex> lock(s->mu);
  auto& node = s->recvs[tag.msg];
  if (!node) {
    if (s->recvs.size() > options_.max_received_per_context) {
      s->recvs.erase(tag.msg);
      throw ProtocolError("context " + ctx_name(tag.ctx) + " already brought " +
                          std::to_string(options_.max_received_per_context) + " messages that require grad to " +
                          agent_.name() + ", its max_received_per_context: refusing one more from rank " +
                          std::to_string(src) + " (raise AutogradOptions::max_received_per_context in dist_autograd::enable)");
    }
    node = std::make_shared<RecvBackward>(tag.ctx, tag.msg, src);
    recvs_.fetch_add(1, std::memory_order_relaxed);
  }
  const std::uint32_t input = node->add_input_metadata(t);
  node->frames.push_back(frame);
  torch::autograd::impl::set_gradient_edge(t, Edge(node, input));
  return t;
}

// ---------------------------------------------------------------- backward

transport::Future<void> Engine::run_part(const std::shared_ptr<ContextState>& state, const edge_list& roots,
                                         const variable_list& grads) {
  parts_.fetch_add(1, std::memory_order_relaxed);
  struct Out {
    std::shared_ptr<RecvBackward> recv;  // null: a leaf
    torch::autograd::AccumulateGrad* leaf = nullptr;
    std::uint32_t input = 0;
  };
  // What goes back over the wire: per received message, its frames and their gradients.
  struct Back {
    std::shared_ptr<RecvBackward> recv;
    std::vector<std::uint32_t> frames;
    std::vector<at::Tensor> grads;
  };
  std::vector<Back> back;
  {
    std::lock_guard<std::mutex> exec(state->exec_mu);
    // The outputs: every leaf accumulator and received-message input the roots reach. The
    // engine captures the gradient flowing into each instead of running the node.
    edge_list outputs;
    std::vector<Out> outs;
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (const auto& e : roots)
      if (e.is_valid() && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(n)) {
        outputs.emplace_back(acc->shared_from_this(), 0);
        outs.push_back(Out{nullptr, acc, 0});
        continue;
      }
      if (auto* recv = dynamic_cast<RecvBackward*>(n)) {
        auto keep = std::static_pointer_cast<RecvBackward>(recv->shared_from_this());
        for (std::uint32_t i = 0; i < recv->num_inputs(); ++i) {
          outputs.emplace_back(keep, i);
          outs.push_back(Out{keep, nullptr, i});
        }
        continue;
      }
      for (const auto& e : n->next_edges())
        if (e.is_valid() && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
    }
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
      at::Tensor g = got[k];
      if (!g.defined()) continue;
      const Out& o = outs[k];
      if (o.leaf) {
        // As the local engine would: the leaf's tensor hooks first, then accumulate (here: into
        // the context), then the accumulator's post hooks (DDP's gradient-ready hooks).
        variable_list in{g};
        for (const auto& hook : o.leaf->pre_hooks()) in = (*hook)(in);
        g = in.at(0);
        if (!g.defined()) continue;
        const at::Tensor& var = o.leaf->variable;
        {
          std::lock_guard<std::mutex> lock(state->mu);
          auto& slot = state->grads[var.unsafeGetTensorImpl()];
          if (slot.second.defined()) slot.second = slot.second + g;
          else slot = {var, g.detach().clone()};
        }
        for (const auto& hook : o.leaf->post_hooks()) (*hook)(variable_list{}, in);
      } else {
        auto [it, fresh] = back_of.emplace(o.recv.get(), back.size());
        if (fresh) back.push_back(Back{o.recv, {}, {}});
        back[it->second].frames.push_back(o.recv->frames.at(o.input));
        back[it->second].grads.push_back(g.detach());
      }
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
  return all_or_first_error(sent).then([self, id](const transport::Future<void>& f) {
    try {
      f.value();
    } catch (const std::exception& e) {
      self->failed_parts_.fetch_add(1);
      throw BackwardError(self->describe(id) + ": " + e.what());
    }
  });
}

transport::Future<void> Engine::on_gradients(std::int64_t ctx, std::int64_t msg, const std::vector<std::uint32_t>& frames,
                                             const std::vector<at::Tensor>& grads) {
  auto s = find(ctx);
  if (!s)
    throw ProtocolError("gradients for unknown distributed-autograd context " + ctx_name(ctx) + " on " + agent_.name() +
                        " (never seen here, or already released)");
  if (frames.size() != grads.size())
    throw ProtocolError("gradients for " + describe(ctx) + ": " + std::to_string(frames.size()) + " frame numbers but " +
                        std::to_string(grads.size()) + " gradients");
  edge_list roots;
  variable_list in;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->sends.find(msg);
    if (it == s->sends.end())
      throw ProtocolError("gradients for unknown autograd message " + ctx_name(msg) + " in " + describe(ctx));
    const SendRecord& rec = it->second;
    roots = rec.edges;
    in.assign(rec.edges.size(), at::Tensor());
    for (std::size_t i = 0; i < frames.size(); ++i) {
      auto pos = std::find(rec.frames.begin(), rec.frames.end(), frames[i]);
      if (pos == rec.frames.end())
        throw ProtocolError("gradients for " + describe(ctx) + ": message " + ctx_name(msg) + " sent no tensor that requires grad in frame " +
                            std::to_string(frames[i]));
      const std::size_t k = static_cast<std::size_t>(pos - rec.frames.begin());
      const at::Tensor& g = grads[i];
      if (g.scalar_type() != rec.dtypes[k] || g.sizes().vec() != rec.sizes[k])
        throw ProtocolError("gradient for frame " + std::to_string(frames[i]) + " of message " + ctx_name(msg) + " in " +
                            describe(ctx) + " is " + describe_tensor(g.scalar_type(), g.sizes().vec()) +
                            ", the tensor sent was " + describe_tensor(rec.dtypes[k], rec.sizes[k]));
      in[k] = in[k].defined() ? in[k] + g : g;
    }
  }
  return run_part(s, roots, in);
}

std::shared_ptr<Engine> engine_of(transport::RpcAgent& agent) {
  auto* e = dynamic_cast<Engine*>(agent.hooks());
  if (!e)
    throw Error("distributed autograd is not enabled on " + agent.name() +
                ": call dist_autograd::enable(agent) in the RpcAgent's setup callback on every worker");
  return e->shared_from_this();
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

void queue_part_callback(std::function<void()> fn) { current_part("queue_part_callback").callbacks.push_back(std::move(fn)); }

}  // namespace distrl::autograd
