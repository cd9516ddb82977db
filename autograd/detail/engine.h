// The distributed-autograd engine of one worker: the transport's MessageHooks (what crosses
// the wire inside a context is recorded here), the context table, and the backward parts.
// Private to autograd/.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "autograd/context.h"
#include "autograd/detail/node_ptr.h"
#include "autograd/step_guard.h"
#include "transport/runtime/future.h"
#include "transport/wire/message_hooks.h"

namespace distrl::transport {
class RpcAgent;
}

namespace distrl::autograd::detail {

// Registered names of the engine's own functions and classes.
constexpr const char* kGradsFn = "__dist_autograd.grads";
constexpr const char* kReleaseFn = "__dist_autograd.release";
constexpr const char* kLiveFn = "__dist_autograd.live";
constexpr const char* kWaitsFn = "__dist_autograd.waits";
constexpr const char* kOptimizerClass = "__dist_autograd.optimizer";

// Where a received message's tensors lead back to: gradients reaching them go to the sender.
// The local engine never runs it: a part captures the gradients flowing into it instead.
class RecvBackward : public torch::autograd::Node {
 public:
  RecvBackward(std::int64_t ctx, std::int64_t msg, int src) : ctx(ctx), msg(msg), src(src) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override;
  std::string name() const override { return "distrl::autograd::RecvBackward"; }

  const std::int64_t ctx, msg;
  const int src;
  std::vector<std::uint32_t> frames;  // input i came from this frame of the message
};

// What one sent message recorded: the gradient edges of its tensors that require grad.
struct SendRecord {
  int dest = -1;
  std::vector<std::uint32_t> frames;  // tensor frames, increasing (the header's "rg")
  torch::autograd::edge_list edges;   // one per frame
  std::vector<std::vector<std::int64_t>> sizes;
  std::vector<c10::ScalarType> dtypes;
};

struct ContextState {
  explicit ContextState(std::int64_t id) : id(id) {}
  const std::int64_t id;
  std::mutex mu;       // guards the members below
  std::mutex exec_mu;  // one local backward part at a time
  std::unordered_map<std::int64_t, SendRecord> sends;
  std::unordered_map<std::int64_t, NodePtrOf<RecvBackward>> recvs;
  std::set<int> peers;    // workers this context's messages went to: they get its release
  std::set<int> senders;  // workers whose messages brought it here: its release comes through them
  bool dropped = false;   // released or reaped: nothing more is recorded or sent in it
  // Leaf gradients, keyed by the leaf's TensorImpl: (leaf, accumulated gradient).
  std::unordered_map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> grads;
  bool graph_used = false;  // a backward without retain_graph ran
};

// Context and message ids: rank << 48 | (incarnation mod 2^8) << 40 | counter (from 1). The
// incarnation keeps a restarted rank's ids apart from its earlier process's.
constexpr int kIdCounterBits = 40;
constexpr int kIdIncarnationBits = 8;
std::int64_t make_id(int rank, std::int64_t incarnation, std::int64_t counter);
std::string id_name(std::int64_t id);  // "rank:incarnation:counter"

// Why a context this worker held is gone (remembered for the last kGoneMemory ids).
struct Gone {
  bool reaped = false;  // false: released (left by its creator, or reaped upstream)
  int lost = -1;        // reaped: the worker whose loss reaped it
};

struct EngineStats {
  std::uint64_t parts = 0, failed_parts = 0, sends = 0, recvs = 0;
};

class Engine final : public transport::MessageHooks, public std::enable_shared_from_this<Engine> {
 public:
  Engine(transport::RpcAgent& agent, const AutogradOptions& options);

  // MessageHooks (see transport/wire/message_hooks.h). enter, on_send and on_receive throw
  // BackwardError for a context that is gone here (released or reaped, or an earlier
  // process's): the call fails, naming the context and this worker.
  std::int64_t current_context() override;
  void on_send(std::int64_t ctx, int dest, const std::vector<transport::OutFrame>& frames,
               transport::MessageTag* tag) override;
  at::Tensor on_receive(const transport::MessageTag& tag, int src, std::uint32_t frame, at::Tensor t) override;
  std::shared_ptr<void> enter(std::int64_t ctx, int src) override;
  void on_peer_down(int rank, const std::string& why) override;

  transport::RpcAgent& agent() { return agent_; }

  std::shared_ptr<ContextState> create();
  std::shared_ptr<ContextState> find(std::int64_t id);
  // Makes ctx current on this thread until the returned object is destroyed; ctx -1 makes
  // "no context" current (the engine's own calls must not record anything). Destroyed in any
  // order, or on another thread, it stops exactly its own entry being current on the thread
  // that made it (never another scope's).
  std::shared_ptr<void> make_current(std::int64_t ctx);
  // Drops the context here and forwards the release to every worker it sent to; completes
  // when all of them acknowledged (forwarding on). Unknown ids complete at once.
  transport::Future<void> release(std::int64_t id);
  // The release handler: the same, except that this worker's own contexts are released only
  // by their Context (peers forward releases to the creator too).
  transport::Future<void> release_from_peer(std::int64_t id);
  // BackwardError naming `what`, the context and this worker when id is gone here (released,
  // reaped, an earlier process's, or this worker's own and left); nothing otherwise.
  void refuse_if_gone(std::int64_t id, const char* what);

  // Runs the local graph from roots (seeded with grads), accumulates leaf gradients into the
  // context, sends the gradients that reach received tensors back to their senders, and
  // completes when those sends' parts have completed. Blocks for the local part only.
  transport::Future<void> run_part(const std::shared_ptr<ContextState>& state, const torch::autograd::edge_list& roots,
                                   const torch::autograd::variable_list& grads);
  // The gradient handler: a part started by gradients for message msg of context ctx.
  transport::Future<void> on_gradients(std::int64_t ctx, std::int64_t msg, const std::vector<std::uint32_t>& frames,
                                       const std::vector<at::Tensor>& grads);

  std::size_t live() const;
  EngineStats stats() const;
  std::mutex& optimizer_mutex() { return optimizer_mu_; }
  std::string describe(std::int64_t ctx) const;  // "context 3:1:17 on worker1"

  // Parameter guards (step_guard.h): the engine tells them when a context is released or
  // reaped; optimizer hosts look up the guards of their parameters.
  void add_guard(const std::shared_ptr<ParameterGuard>& guard);
  std::vector<std::shared_ptr<ParameterGuard>> guards_for(const std::vector<at::Tensor>& params);
  // Serialize guards' waits, flat (waiting context, holder) pairs: this worker's, and every
  // worker's (asked over RPC, outside any context; a worker that does not answer is skipped).
  std::vector<std::int64_t> guard_waits() const;
  std::vector<std::int64_t> guard_waits_everywhere();

 private:
  // The live context id: with create, a context a peer's request names is created on first
  // sight. BackwardError (naming what) when the context is gone here (gone_locked) or, without
  // create, unknown. Adds src (>= 0) to its senders and watches src, so that its loss reaps
  // what it brought.
  std::shared_ptr<ContextState> usable(std::int64_t id, int src, bool create, const char* what);
  // Registers a new context (mu_ held); ProtocolError once max_live_contexts are live.
  std::shared_ptr<ContextState> add_locked(std::int64_t id);
  // Forgets a context and remembers why among the last kGoneMemory (mu_ held); marks it dropped.
  std::shared_ptr<ContextState> drop_locked(std::int64_t id, Gone why);
  // Why id is gone here ("" when it is not: live, or a peer's context never seen); mu_ held.
  std::string gone_locked(std::int64_t id) const;
  std::string gone_reason(std::int64_t id) const;  // takes mu_
  [[noreturn]] static void refuse(const std::string& reason, const char* what);
  // ProtocolError naming max_messages_per_context when s holds that many records (s.mu held).
  void check_room(const ContextState& s, const char* what, int peer) const;
  // Sends the release of a dropped context on to the live workers it sent to.
  transport::Future<void> forward_release(const std::shared_ptr<ContextState>& s);
  // Tells the guards that these contexts are gone (mu_ not held).
  void notify_released(const std::vector<std::int64_t>& ids);
  std::int64_t next_id(std::atomic<std::int64_t>& counter, const char* what);
  bool own(std::int64_t id) const {
    return (id >> kIdCounterBits) == (make_id(rank_, incarnation_, 0) >> kIdCounterBits);
  }

  transport::RpcAgent& agent_;
  const int rank_;
  const std::int64_t incarnation_;
  const AutogradOptions options_;
  std::atomic<std::int64_t> next_ctx_{1}, next_msg_{1};
  std::unique_ptr<std::atomic<bool>[]> watched_;  // per rank: watch() called
  mutable std::mutex mu_;
  std::unordered_map<std::int64_t, std::shared_ptr<ContextState>> contexts_;
  std::unordered_map<std::int64_t, Gone> gone_;  // the last kGoneMemory contexts dropped here, so
  std::deque<std::int64_t> gone_order_;          // that a late message fails loudly
  std::mutex optimizer_mu_;                      // all local optimizers of this worker
  mutable std::mutex guards_mu_;
  std::vector<std::weak_ptr<ParameterGuard>> guards_;
  std::atomic<std::uint64_t> parts_{0}, failed_parts_{0}, sends_{0}, recvs_{0};
};

// Completes when every future has, or at the first error (a dead peer on one branch fails at
// once, without waiting for the others).
transport::Future<void> all_or_first_error(const std::vector<transport::Future<void>>& fs);

// The engine installed on agent (throws Error naming the fix when enable() was not called).
std::shared_ptr<Engine> engine_of(transport::RpcAgent& agent);

}  // namespace distrl::autograd::detail
