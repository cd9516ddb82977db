// ParameterGuard: how several trainers' contexts share one owner's parameters — the
// model-on-server form, where every trainer runs the owner's module inside its own context,
// then backward and DistributedOptimizer::step. Without a guard, a step may change the
// parameters while another context's graph still holds them: PyTorch's Python optimizers bump
// the version counter and that context's backward fails ("modified by an inplace operation":
// the tutorial's crash with two trainers); LibTorch 1.13's do not, and the other context's
// step is silently computed against parameters that changed under it (tested). Three policies:
//
//   serialize  one context at a time holds the parameters, from its first guarded forward on
//              this worker to its step here (or its release): every step is computed against
//              exactly the parameters it is applied to, so the run equals one process applying
//              the same batches in the order the owner granted them. Trainers' data loading and
//              loss run concurrently; the owner's part does not.
//   hogwild    no lock: forwards, backwards and steps of all contexts interleave (Hogwild!); a
//              backward may read parameters another step has changed since its forward.
//   versioned  no lock; every step bumps the parameters' version; the step of a context whose
//              first forward saw an older version is refused with StaleStepError (naming the
//              context and both versions) and the trainer retries with a fresh forward
//              (optimistic concurrency: no step is ever computed against stale parameters).
//
// Under hogwild and versioned, optimizers step these parameters through aliases with their own
// autograd version counter, so a concurrent backward never fails on an in-place update,
// whichever optimizer implementation steps them.
//
//   // on the owner, before any DistributedOptimizer over these parameters is created:
//   auto guard = autograd::ParameterGuard::create(agent, net->parameters(), StepPolicy::Versioned);
//   agent.register_function("forward", [=](at::Tensor x) { guard->enter(); return net->forward(x); });
//
// Thread-safety: every member is thread-safe. In serialize, enter() blocks its handler thread
// until the holder steps or is released (bounded by wait_timeout, then TimeoutError naming the
// holder): give the owner's handler pool one thread per trainer plus one. A holder whose worker
// dies is released when its contexts are reaped. Deadlocks: contexts that hold serialize guards
// on several owners and enter them in opposite orders would wait for each other until
// wait_timeout. A wait that lasts 200 ms asks every worker which contexts wait for which
// (one small RPC each, answered on their I/O threads, each bounded by 1 s; asked again at
// doubling intervals up to 3.2 s) and, when the waits close a cycle, the context of the cycle
// with the largest id (highest creator rank, then incarnation, then counter -- one choice every
// worker makes alike) is refused at once with GuardDeadlockError
// naming the cycle; its trainer leaves the context, which frees what it held, and may retry.
// Entering guards in one order (by owner rank, say) never deadlocks. Lifetime: the engine keeps
// a weak reference; the guard ends with its last shared_ptr.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/error.h"

namespace distrl::transport {
class RpcAgent;
}

namespace distrl::autograd {

namespace detail {
class Engine;
}

enum class StepPolicy { Serialize, Hogwild, Versioned };
// "serialize" | "hogwild" | "versioned"; ConfigError naming the known ones otherwise.
StepPolicy parse_step_policy(const std::string& name);
const char* to_string(StepPolicy p);

// A step computed against parameters that have changed since (versioned policy). Crosses the
// wire as a RemoteError of this type; DistributedOptimizer::step rethrows it as this type.
class StaleStepError : public Error {
 public:
  using Error::Error;
};

// Contexts waiting for serialize guards in a cycle; thrown to the one with the largest id (the others
// go on once its context is left). Crosses the wire as a RemoteError of this type.
class GuardDeadlockError : public Error {
 public:
  using Error::Error;
};

class ParameterGuard {
 public:
  struct Stats {
    std::uint64_t version = 0;        // steps applied so far
    std::uint64_t stale_refused = 0;  // versioned: steps refused
    std::uint64_t waits = 0;          // serialize: forwards that had to wait for another holder
    double wait_ms = 0;               // serialize: total time they waited
  };

  // Guards params (tensors owned by this worker) with policy; dist_autograd::enable(agent) must
  // have been called. Create it before the DistributedOptimizers over these parameters.
  static std::shared_ptr<ParameterGuard> create(transport::RpcAgent& agent, std::vector<at::Tensor> params,
                                                StepPolicy policy,
                                                std::chrono::milliseconds wait_timeout = std::chrono::seconds(60));

  // Call at the start of the owner's forward (in a handler, with the caller's context
  // current). serialize: waits until no other context holds the parameters, then holds them
  // for this one; versioned: remembers the version this context first saw. Outside a context:
  // nothing.
  void enter();

  StepPolicy policy() const { return policy_; }
  Stats stats() const;
  bool guards(const at::Tensor& t) const;

  // The optimizer's side (autograd/ internal, public for the owner's optimizer host):
  // before_step throws StaleStepError (versioned) for a context that saw an older version;
  // after_step records a step (stepped: any of these parameters had a gradient) and ends a
  // serialize hold; released ends whatever the context held.
  void before_step(std::int64_t ctx);
  void after_step(std::int64_t ctx, bool stepped);
  void released(std::int64_t ctx);
  // serialize: (waiting context, holder) pairs, appended flat to out.
  void waits(std::vector<std::int64_t>* out) const;

  ParameterGuard(std::shared_ptr<detail::Engine> engine, std::vector<at::Tensor> params, StepPolicy policy,
                 std::chrono::milliseconds wait_timeout);

 private:
  // serialize: waits (mu_ held through lock) until no other context holds the parameters;
  // TimeoutError at wait_timeout, GuardDeadlockError when ctx has the largest id of a cycle of waits.
  void wait_for_holder(std::unique_lock<std::mutex>& lock, std::int64_t ctx);

  std::shared_ptr<detail::Engine> engine_;
  const StepPolicy policy_;
  const std::chrono::milliseconds wait_timeout_;
  std::unordered_set<const void*> impls_;  // the guarded parameters' TensorImpls

  mutable std::mutex mu_;  // guards the members below
  std::condition_variable cv_;
  std::int64_t holder_ = -1;                       // serialize: the context holding the parameters
  std::unordered_map<std::int64_t, int> waiting_;  // serialize: contexts waiting (how many calls)
  std::chrono::steady_clock::time_point held_since_;
  std::unordered_map<std::int64_t, std::uint64_t> seen_;  // versioned: context -> version at first forward
  Stats stats_;
};

}  // namespace distrl::autograd
