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
#include <unordered_set>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "autograd/context.h"
#include "autograd/step_guard.h"
#include "transport/future.h"
#include "transport/message_hooks.h"

namespace distrl::transport {
class RpcAgent;
}

namespace distrl::autograd::detail {

// Registered names of the engine's own functions and classes.
constexpr const char* kGradsFn = "__dist_autograd.grads";
constexpr const char* kReleaseFn = "__dist_autograd.release";
constexpr const char* kLiveFn = "__dist_autograd.live";
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
  std::unordered_map<std::int64_t, std::shared_ptr<RecvBackward>> recvs;
  std::set<int> peers;  // workers this context's messages went to: they get its release
  // Leaf gradients, keyed by the leaf's TensorImpl: (leaf, accumulated gradient).
  std::unordered_map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> grads;
  bool graph_used = false;  // a backward without retain_graph ran
};

struct EngineStats {
  std::uint64_t parts = 0, failed_parts = 0, sends = 0, recvs = 0;
};

class Engine final : public transport::MessageHooks, public std::enable_shared_from_this<Engine> {
 public:
  Engine(transport::RpcAgent& agent, const AutogradOptions& options);

  // MessageHooks (see transport/message_hooks.h).
  std::int64_t current_context() override;
  void on_send(std::int64_t ctx, int dest, const std::vector<transport::OutFrame>& frames, transport::MessageTag* tag) override;
  at::Tensor on_receive(const transport::MessageTag& tag, int src, std::uint32_t frame, at::Tensor t) override;
  std::shared_ptr<void> enter(std::int64_t ctx, int src) override;
  void on_peer_down(int rank, const std::string& why) override;

  transport::RpcAgent& agent() { return agent_; }

  std::shared_ptr<ContextState> create();
  std::shared_ptr<ContextState> find(std::int64_t id);
  // Makes ctx current on this thread until the returned object is destroyed; ctx -1 makes
  // "no context" current (the engine's own calls must not record anything).
  std::shared_ptr<void> make_current(std::int64_t ctx);
  // Drops the context here and forwards the release to every worker it sent to; completes
  // when all of them acknowledged (forwarding on). Unknown ids complete at once.
  transport::Future<void> release(std::int64_t id);

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
  std::string describe(std::int64_t ctx) const;  // "context 3:17 on worker1"

  // Parameter guards (step_guard.h): the engine tells them when a context is released or
  // reaped; optimizer hosts look up the guards of their parameters.
  void add_guard(const std::shared_ptr<ParameterGuard>& guard);
  std::vector<std::shared_ptr<ParameterGuard>> guards_for(const std::vector<at::Tensor>& params);

 private:
  std::shared_ptr<ContextState> get_or_create(std::int64_t id);
  // Registers a new context (mu_ held); ProtocolError once max_contexts_ are live.
  std::shared_ptr<ContextState> add_locked(std::int64_t id);
  // Forgets a context and remembers its id among the last kReleasedMemory (mu_ held).
  std::shared_ptr<ContextState> drop_locked(std::int64_t id);
  // Tells the guards that these contexts are gone (mu_ not held).
  void notify_released(const std::vector<std::int64_t>& ids);

  transport::RpcAgent& agent_;
  const int rank_;
  const AutogradOptions options_;
  std::atomic<std::int64_t> next_ctx_{1}, next_msg_{1};
  mutable std::mutex mu_;
  std::unordered_map<std::int64_t, std::shared_ptr<ContextState>> contexts_;
  std::unordered_set<std::int64_t> released_;  // the last kReleasedMemory releases, so a late
  std::deque<std::int64_t> released_order_;    // message cannot bring a context back
  std::mutex optimizer_mu_;                    // all local optimizers of this worker
  std::mutex guards_mu_;
  std::vector<std::weak_ptr<ParameterGuard>> guards_;
  std::atomic<std::uint64_t> parts_{0}, failed_parts_{0}, sends_{0}, recvs_{0};
};

// The engine installed on agent (throws Error naming the fix when enable() was not called).
std::shared_ptr<Engine> engine_of(transport::RpcAgent& agent);

}  // namespace distrl::autograd::detail
