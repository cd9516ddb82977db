// Distributed autograd, like torch.distributed.autograd: RPCs made while a Context is active
// record what crossed the wire, and backward(ctx, roots) runs the backward pass across every
// worker that took part. Gradients accumulate in the context, per worker, not in `.grad`.
//
//   RpcAgent agent(opts, [](RpcAgent& a) { dist_autograd::enable(a); ... });  // every worker
//   {
//     dist_autograd::Context ctx(agent);
//     at::Tensor y = agent.rpc_sync<at::Tensor>("ps", "forward", x);   // recorded
//     dist_autograd::backward(ctx, {loss_of(y)});                       // runs on ps too
//     auto grads = dist_autograd::get_gradients(ctx);                   // this worker's leaves
//     optimizer.step(ctx);                                              // DistributedOptimizer
//   }                                                                   // released everywhere
//
// What is recorded: inside a context, every message (request or reply, to_here included)
// whose tensors require grad records a send on the sender (the tensors' gradient edges) and
// gives the receiver tensors whose grad_fn leads back to it, paired by a message id unique
// across workers. backward runs the local graph from the roots, sends the gradients that
// reach received tensors back to their senders, which run their part, and so on; it returns
// when every part has finished (each part answers only when everything it started has).
// Only sends the roots reach take part: an RPC result the loss does not use costs nothing
// and cannot hang the pass.
//
// Threads and lifetime: a Context is current on the thread that made it until it is destroyed
// (in any order, on any thread: it then stops being current there, and only it); handlers
// serving a request of a context run with it current, so their own RPCs carry it too. backward
// blocks the calling thread; local parts on other workers run on their handler pools. Leaving a
// context releases it on every worker that saw it (asynchronously; each release is
// acknowledged). A worker drops a context it holds for a peer when the release arrives, or
// reaps it when the worker that made it, or every worker that brought it there, is lost
// (reaping passes the release on). A context dropped somewhere fails loudly there: a later
// request, reply, nested call or gradient of it throws BackwardError naming the context and the
// worker. Everything here is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/error.h"

namespace distrl::transport {
class RpcAgent;
}

namespace distrl::autograd {

namespace detail {
class Engine;
struct ContextState;
}  // namespace detail

struct AutogradOptions {
  // Contexts this worker holds at most (its own and those seen from peers). A message of one
  // more context is refused with ProtocolError naming this option, so no peer can make a
  // worker hold unbounded state; contexts left normally are released and do not count.
  std::size_t max_live_contexts = 1 << 16;
  // Messages with tensors that require grad that one context may record on this worker, sent
  // and received together (each keeps part of the graph until the context is released); one
  // more is refused the same way: a request fails at its caller, a reply is answered with the
  // error instead.
  std::size_t max_messages_per_context = 1 << 20;
};

// Installs distributed autograd on this worker: the message hooks, the gradient and release
// handlers, the optimizer class. Call it in the RpcAgent's setup callback on every worker.
void enable(transport::RpcAgent& agent, AutogradOptions options = {});

// A distributed backward that could not complete: a peer died, a part threw, a gradient was
// refused, or the deadline passed. The message names the context and the worker.
class BackwardError : public Error {
 public:
  using Error::Error;
};

class Context {
 public:
  // A new context with a globally unique id (rank << 48 | incarnation mod 256 << 40 | counter:
  // a restarted rank's ids never repeat its earlier process's), current on this thread until
  // destroyed. Throws Error when enable(agent) was not called, ProtocolError when
  // max_live_contexts are live here.
  explicit Context(transport::RpcAgent& agent);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  std::int64_t id() const;
  transport::RpcAgent& agent() const;

 private:
  friend void backward(const Context&, const std::vector<at::Tensor>&, bool);
  friend std::vector<std::pair<at::Tensor, at::Tensor>> get_gradients(const Context&);
  std::shared_ptr<detail::Engine> engine_;
  std::shared_ptr<detail::ContextState> state_;
  std::shared_ptr<void> scope_;  // current on the creating thread while held
};

// Runs the backward pass from roots (each a single-element tensor, seeded with 1) across every
// worker the roots reach, and returns when all parts have finished. Throws BackwardError
// (naming the context and worker) on failure, or when the pass exceeds the agent's
// rpc_timeout. retain_graph=false (the default) allows one backward per context, as in torch.
void backward(const Context& ctx, const std::vector<at::Tensor>& roots, bool retain_graph = false);

// The gradients this worker's leaf tensors received in ctx, as (tensor, gradient) pairs.
std::vector<std::pair<at::Tensor, at::Tensor>> get_gradients(const Context& ctx);
// The same on a worker that serves the context (an owner stepping its parameters, say):
// empty when this worker has not seen context `ctx`.
std::vector<std::pair<at::Tensor, at::Tensor>> get_gradients(transport::RpcAgent& agent, std::int64_t ctx);

// For gradient hooks that must see a distributed backward as the local engine shows a local
// one (DDP's reducer): while a backward part runs its leaves' hooks on this thread, the
// context's accumulated gradient of a leaf (undefined: none yet), a way to replace it, and
// callbacks run on this thread after the part's last leaf (the local engine's queue_callback).
// Each arriving gradient runs its own part, so a leaf's hooks run once per part that reaches it.
// Outside a part, in_backward_part() is false and the others throw Error.
bool in_backward_part();
std::int64_t part_context();  // the id of the part's context
// A context id as every error names it: "rank:incarnation:counter" (its creator's).
std::string context_name(std::int64_t id);
at::Tensor part_gradient(const at::Tensor& leaf);
void set_part_gradient(const at::Tensor& leaf, const at::Tensor& grad);
void queue_part_callback(std::function<void()> fn);

// Contexts this worker holds now: created here and not yet left, or seen from a peer and not
// yet released. Returns to 0 once every context is left and released.
std::size_t live_contexts(transport::RpcAgent& agent);

}  // namespace distrl::autograd

namespace distrl {
namespace dist_autograd = autograd;  // the name torch users look for
}
