// The context table of one worker's engine: ids, the contexts it holds and those it dropped,
// each thread's current context, release and reaping, and the transport's hooks that record
// what crosses the wire. The backward parts are in engine.cpp.
#include <algorithm>
#include <thread>

#include <torch/csrc/autograd/variable.h>

#include "autograd/detail/engine.h"
#include "common/log.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::autograd::detail {
namespace {

static_assert(kIdCounterBits + kIdIncarnationBits == 48, "the rank starts at bit 48");
constexpr std::int64_t kCounterMask = (std::int64_t{1} << kIdCounterBits) - 1;
constexpr std::size_t kGoneMemory = 1 << 16;

int creator(std::int64_t id) { return static_cast<int>(id >> 48); }
std::int64_t incarnation_of(std::int64_t id) { return (id >> kIdCounterBits) & ((1 << kIdIncarnationBits) - 1); }

// The current context of this thread, per engine: a stack (contexts nest, handlers enter). An
// entry is current while its scope lives; a scope left out of order or on another thread
// expires its own entry only, which is skipped and then pruned on this thread.
struct Current {
  const Engine* engine;
  std::int64_t ctx;
  std::weak_ptr<void> scope;
};
thread_local std::vector<Current> t_current;

void prune_left() {
  t_current.erase(
      std::remove_if(t_current.begin(), t_current.end(), [](const Current& c) { return c.scope.expired(); }),
      t_current.end());
}

}  // namespace

std::int64_t make_id(int rank, std::int64_t incarnation, std::int64_t counter) {
  return (static_cast<std::int64_t>(rank) << 48) | ((incarnation & ((1 << kIdIncarnationBits) - 1)) << kIdCounterBits) |
         counter;
}

std::string id_name(std::int64_t id) {
  return std::to_string(creator(id)) + ":" + std::to_string(incarnation_of(id)) + ":" +
         std::to_string(id & kCounterMask);
}

Engine::Engine(transport::RpcAgent& agent, const AutogradOptions& options)
    : agent_(agent), rank_(agent.rank()), incarnation_(agent.incarnation()), options_(options),
      watched_(new std::atomic<bool>[static_cast<std::size_t>(agent.world_size())]()) {}

std::string Engine::describe(std::int64_t ctx) const { return "context " + id_name(ctx) + " on " + agent_.name(); }

std::int64_t Engine::next_id(std::atomic<std::int64_t>& counter, const char* what) {
  const std::int64_t n = counter.fetch_add(1);
  if (n > kCounterMask)
    throw Error("distributed autograd on " + agent_.name() + " used up its 2^40 " + what +
                " ids (the counter of one process): restart the process");
  return make_id(rank_, incarnation_, n);
}

// ---------------------------------------------------------------- the table

std::shared_ptr<ContextState> Engine::add_locked(std::int64_t id) {
  if (contexts_.size() >= options_.max_live_contexts)
    throw ProtocolError("distributed autograd on " + agent_.name() + " holds " + std::to_string(contexts_.size()) +
                        " live contexts, its max_live_contexts: refusing context " + id_name(id) +
                        " (are contexts left? raise AutogradOptions::max_live_contexts in dist_autograd::enable)");
  auto s = std::make_shared<ContextState>(id);
  contexts_[id] = s;
  return s;
}

std::shared_ptr<ContextState> Engine::drop_locked(std::int64_t id, Gone why) {
  std::shared_ptr<ContextState> s;
  auto it = contexts_.find(id);
  if (it != contexts_.end()) {
    s = std::move(it->second);
    contexts_.erase(it);
    std::lock_guard<std::mutex> lock(s->mu);
    s->dropped = true;
  }
  if (gone_.emplace(id, why).second) {
    gone_order_.push_back(id);
    if (gone_order_.size() > kGoneMemory) {
      gone_.erase(gone_order_.front());
      gone_order_.pop_front();
    }
  }
  return s;
}

std::string Engine::gone_locked(std::int64_t id) const {
  auto it = gone_.find(id);
  if (it != gone_.end()) {
    if (!it->second.reaped)
      return id_name(id) + " was released on " + agent_.name() + " (left by its creator, or reaped upstream)";
    const int lost = it->second.lost;
    const std::string who =
        lost >= 0 && lost < agent_.world_size() ? agent_.workers().at(lost).name : "rank " + std::to_string(lost);
    return id_name(id) + " was reaped on " + agent_.name() + " when " + who +
           " was lost (exited, crashed, or silent for 10 s; the worker that made the context or brought it here)";
  }
  if (creator(id) == rank_ && incarnation_of(id) != (incarnation_ & ((1 << kIdIncarnationBits) - 1)))
    return id_name(id) + " was made by an earlier process of " + agent_.name() + " (incarnation " +
           std::to_string(incarnation_of(id)) + "; this is incarnation " + std::to_string(incarnation_) + ")";
  if (creator(id) == rank_)
    return id_name(id) + " of " + agent_.name() + " is no longer live there (its Context was left)";
  return {};
}

void Engine::refuse(const std::string& reason, const char* what) {
  throw BackwardError("dist_autograd: " + std::string(what) + " of context " + reason +
                      ": its recorded graph is gone there; leave the context and start a new one");
}

void Engine::refuse_if_gone(std::int64_t id, const char* what) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!contexts_.count(id)) reason = gone_locked(id);
  }
  if (!reason.empty()) refuse(reason, what);
}

std::shared_ptr<ContextState> Engine::create() {
  const std::int64_t id = next_id(next_ctx_, "context");
  std::lock_guard<std::mutex> lock(mu_);
  return add_locked(id);
}

std::shared_ptr<ContextState> Engine::find(std::int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : it->second;
}

std::shared_ptr<ContextState> Engine::usable(std::int64_t id, int src, bool create, const char* what) {
  std::shared_ptr<ContextState> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(id);
    if (it != contexts_.end()) {
      s = it->second;
    } else {
      std::string reason = gone_locked(id);
      if (reason.empty() && !create) reason = id_name(id) + " is not known on " + agent_.name();
      if (!reason.empty()) refuse(reason, what);
      s = add_locked(id);
    }
  }
  if (src < 0 || src == rank_ || src >= agent_.world_size()) return s;
  bool fresh;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    fresh = s->senders.insert(src).second;
  }
  if (fresh && !watched_[src].exchange(true)) agent_.watch(src);  // so that its loss reaps what it brought
  return s;
}

std::size_t Engine::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return contexts_.size();
}

EngineStats Engine::stats() const {
  return EngineStats{parts_.load(), failed_parts_.load(), sends_.load(), recvs_.load()};
}

std::shared_ptr<void> Engine::make_current(std::int64_t ctx) {
  prune_left();  // entries of scopes left on other threads
  std::shared_ptr<void> scope(nullptr, [owner = std::this_thread::get_id()](void*) {
    if (std::this_thread::get_id() == owner) prune_left();
  });
  t_current.push_back(Current{this, ctx, scope});
  return scope;
}

std::int64_t Engine::current_context() {
  for (auto it = t_current.rbegin(); it != t_current.rend(); ++it)
    if (it->engine == this && !it->scope.expired()) return it->ctx;
  return -1;
}

// ---------------------------------------------------------------- release and reaping

transport::Future<void> Engine::release(std::int64_t id) {
  std::shared_ptr<ContextState> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = drop_locked(id, Gone{});
  }
  notify_released({id});
  return s ? forward_release(s) : transport::Future<void>::ready();
}

transport::Future<void> Engine::release_from_peer(std::int64_t id) {
  // A peer forwards the release to everyone its messages went to, the creator too: only the
  // creator's Context releases its own context.
  if (own(id)) return transport::Future<void>::ready();
  return release(id);
}

transport::Future<void> Engine::forward_release(const std::shared_ptr<ContextState>& s) {
  std::set<int> peers;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    peers = s->peers;
  }
  std::vector<transport::Future<void>> acks;
  auto none = make_current(-1);
  for (int p : peers) {
    if (p == rank_ || agent_.connection_lost(p)) continue;
    acks.push_back(agent_.rpc_async<void>(p, kReleaseFn, s->id));
  }
  if (acks.empty()) return transport::Future<void>::ready();
  auto self = shared_from_this();
  const std::int64_t id = s->id;
  return all_or_first_error(acks).then_inline([self, id](const transport::Future<void>& f) {
    try {
      f.value();
    } catch (const std::exception& e) {
      DISTRL_LOG(Debug,
                 "dist_autograd: release of " << self->describe(id) << " not acknowledged everywhere: " << e.what());
    }
  });
}

void Engine::on_peer_down(int rank, const std::string& why) {
  // What no one can release any more: contexts the lost worker made, and contexts only lost
  // workers brought here (a release reaches this worker only through those that sent to it).
  // Reaping passes the release on, so workers that got the context from here drop it too.
  std::vector<std::shared_ptr<ContextState>> reaped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::int64_t> ids;
    for (auto& [id, s] : contexts_) {
      if (own(id)) continue;
      std::lock_guard<std::mutex> l(s->mu);
      const bool brought_by_lost =
          s->senders.count(rank) > 0 && std::all_of(s->senders.begin(), s->senders.end(),
                                                    [&](int r) { return r == rank || agent_.connection_lost(r); });
      if (creator(id) == rank || brought_by_lost) ids.push_back(id);
    }
    for (auto id : ids) reaped.push_back(drop_locked(id, Gone{true, rank}));
  }
  if (reaped.empty()) return;
  DISTRL_LOG(Info, "dist_autograd: " << agent_.name() << " reaps " << reaped.size() << " context(s) after losing rank "
                                     << rank << " (" << why << ")");
  std::vector<std::int64_t> ids;
  for (auto& s : reaped) ids.push_back(s->id);
  notify_released(ids);
  for (auto& s : reaped) forward_release(s);  // asynchronous: the I/O thread never waits
}

// ---------------------------------------------------------------- hooks

std::shared_ptr<void> Engine::enter(std::int64_t ctx, int src) {
  usable(ctx, src, /*create=*/true, "a request");
  return make_current(ctx);
}

void Engine::on_send(std::int64_t ctx, int dest, const std::vector<transport::OutFrame>& frames,
                     transport::MessageTag* tag) {
  auto s = usable(ctx, -1, /*create=*/false, "a message sent");
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
  {
    std::lock_guard<std::mutex> lock(s->mu);
    // Checked under the context's lock: either the release sees dest among the peers, or this
    // send sees the context dropped (nothing reaches a worker that no release would reach).
    if (!s->dropped) {
      s->peers.insert(dest);
      if (rec.frames.empty()) return;
      check_room(*s, "send one more to", dest);
      const std::int64_t msg = next_id(next_msg_, "message");
      tag->msg = msg;
      tag->grad_frames = rec.frames;
      s->sends.emplace(msg, std::move(rec));
      sends_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  refuse(gone_reason(ctx), "a message sent");  // outside s->mu: gone_reason takes mu_
}

at::Tensor Engine::on_receive(const transport::MessageTag& tag, int src, std::uint32_t frame, at::Tensor t) {
  auto s = usable(tag.ctx, src, /*create=*/false, "a message received");
  std::unique_lock<std::mutex> lock(s->mu);
  if (s->dropped) {
    lock.unlock();  // gone_reason takes mu_
    refuse(gone_reason(tag.ctx), "a message received");
  }
  auto it = s->recvs.find(tag.msg);
  if (it == s->recvs.end()) {
    check_room(*s, "take one more from", src);
    it = s->recvs.emplace(tag.msg, make_node<RecvBackward>(tag.ctx, tag.msg, src)).first;
    recvs_.fetch_add(1, std::memory_order_relaxed);
  }
  RecvBackward& node = *it->second;
  const std::uint32_t input = node.add_input_metadata(t);
  node.frames.push_back(frame);
  torch::autograd::impl::set_gradient_edge(t, torch::autograd::Edge(it->second, input));
  return t;
}

void Engine::check_room(const ContextState& s, const char* what, int peer) const {
  const std::size_t held = s.sends.size() + s.recvs.size();
  if (held < options_.max_messages_per_context) return;
  throw ProtocolError(
      "context " + id_name(s.id) + " already recorded " + std::to_string(held) + " messages that require grad on " +
      agent_.name() + " (sent and received), its max_messages_per_context: refusing to " + what + " rank " +
      std::to_string(peer) + " (raise AutogradOptions::max_messages_per_context in dist_autograd::enable)");
}

std::string Engine::gone_reason(std::int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string reason = gone_locked(id);
  return reason.empty() ? id_name(id) + " was dropped on " + agent_.name() : reason;
}

std::shared_ptr<Engine> engine_of(transport::RpcAgent& agent) {
  auto* e = dynamic_cast<Engine*>(agent.hooks());
  if (!e)
    throw Error("distributed autograd is not enabled on " + agent.name() +
                ": call dist_autograd::enable(agent) in the RpcAgent's setup callback on every worker");
  return e->shared_from_this();
}

}  // namespace distrl::autograd::detail
