// RpcAgent: this process's member of an RPC group, like torch.distributed.rpc.
//
//   RpcAgent agent(RpcOptions{.name = "worker0"});          // rendezvous (env:// by default)
//   agent.register_function("add", [](int a, int b) { return a + b; });
//   int three = agent.rpc_sync<int>("worker1", "add", 1, 2);
//   RRef<Counter> c = agent.remote<Counter>("worker1", "Counter", 10);
//   c.rpc_sync<int>("increment", 5);
//   agent.shutdown();                                         // waits for everyone
//
// Threads (docs/threads.md): handlers run on the pool of num_worker_threads and may run
// concurrently; one registered with RunOn::IoThread runs on the I/O loop instead and must not
// block it. Then-callbacks of the futures returned here run on the pool. A handler returning Future<R> answers when that future completes (async
// execution). Register in the constructor's setup callback so no peer can call before the
// function exists. Thread-safe: any thread may call, including handlers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/runtime/future.h"
#include "transport/rpc/options.h"
#include "transport/rpc/rref.h"
#include "transport/wire/message_hooks.h"

namespace distrl::transport {

class Store;
namespace detail {
class RpcCore;
}  // namespace detail

template <typename T>
class ClassBuilder;

// Where a registered function runs. Pool (the default) suits any handler. IoThread skips the
// hand-off to the pool and back (two thread wake-ups per call, the larger part of a small
// call's cost on a busy machine), but the handler then holds up all of this worker's traffic
// while it runs: use it only for handlers that return at once, such as one that queues the
// request and returns a Future (a batcher), or a tiny computation.
enum class RunOn { Pool, IoThread };

class RpcAgent {
 public:
  // Rendezvous with the other workers (options.init_method), then serve. setup (optional)
  // runs before any peer can reach this worker: register functions and classes there.
  // Throws ConfigError for bad options, TimeoutError when peers miss rendezvous_timeout.
  // Restart: a process started under a rank whose earlier process died rejoins the running
  // world (the store counts incarnations): it tells every peer its new address, and their calls
  // to the earlier process fail ("restarted"), connection_lost() turns false again and new calls
  // reach it. It starts empty: objects and RRefs of the earlier process are gone. Rank 0 can
  // rejoin only when the store outlives it (DISTRL_STORE_HOSTED=1: distrl-launch hosts it).
  explicit RpcAgent(RpcOptions options, const std::function<void(RpcAgent&)>& setup = {});
  // Not graceful: fails pending calls. Call shutdown() first for a clean exit.
  ~RpcAgent();
  RpcAgent(const RpcAgent&) = delete;
  RpcAgent& operator=(const RpcAgent&) = delete;

  const std::string& name() const;
  const RpcOptions& options() const;
  int rank() const;
  int world_size() const;
  // 1 for the first process of this rank; n for the n-th (a rank that rejoined after its earlier
  // process died). Known from the setup callback on: restore saved state there when > 1.
  std::int64_t incarnation() const;
  const std::vector<WorkerInfo>& workers() const;
  const WorkerInfo& worker(const Target& t) const;
  RpcStats stats() const;
  // True once this worker saw its connection to t drop (the process exited or crashed: at once;
  // it was stopped or its host unreachable: after 10 s without a heartbeat, 2 s apart, or a
  // connection opened to it that did not finish its handshake in 10 s); calls
  // to it then fail at once, until its connection comes back (the same process, reachable
  // again) or a new process rejoins under t's rank. For a process that
  // waits for requests from a peer that may die.
  bool connection_lost(const Target& t) const;
  // How many times the connection to t was reported lost (0 while it never was). A failure
  // that came with a drop may be undone when the connection comes back: compare the counts
  // before and after a call to tell "t dropped meanwhile" from "t refused" even when the
  // connection is back by the time the failure is handled. Any thread.
  std::uint64_t connection_drops(const Target& t) const;
  // Connects to t now (connections are otherwise made on the first call), so that
  // connection_lost(t) turns true when t dies even if this worker never calls it: for a
  // server that only answers.
  void watch(const Target& t);
  // The rendezvous store (hosted by rank 0), e.g. for a process group beside this agent:
  //   auto pg = make_zmq_process_group(agent.store(), agent.rank(), agent.world_size(), {});
  // Valid until shutdown().
  Store& store();

  // fn: any callable with msgpack-serializable arguments and result (or Future<result>).
  template <typename F>
  void register_function(const std::string& name, F fn, RunOn where = RunOn::Pool) {
    auto c = detail::make_callable<void>(name, std::move(fn));
    c.run_inline = where == RunOn::IoThread;
    engine_->add_callable(name, std::move(c));
  }
  // A class the peers can construct with remote<T>(to, name, args...).
  template <typename T>
  ClassBuilder<T> register_class(const std::string& name) {
    return ClassBuilder<T>(engine_, name);
  }

  template <typename R, typename... Args>
  Future<R> rpc_async(const Target& to, const std::string& fn, const Args&... args) {
    detail::Header h;
    h.fn = fn;
    return detail::call_async<R>(engine_, engine_->resolve(to), std::move(h), detail::args_writer(args...),
                                 engine_->timeout_for(to));
  }
  // Blocks the calling thread until the answer (or the error) and returns it. The calling thread
  // sends and receives itself, on a channel of its own (docs/threads.md), so the call skips the
  // I/O loop both ways; timeouts, a dead peer, malformed replies and shutdown fail it exactly
  // as they fail rpc_async's future. Not from a RunOn::IoThread handler (use rpc_async there).
  template <typename R, typename... Args>
  R rpc_sync(const Target& to, const std::string& fn, const Args&... args) {
    detail::Header h;
    h.fn = fn;
    return detail::call_sync<R>(engine_, engine_->resolve(to), std::move(h), detail::args_writer(args...),
                                engine_->timeout_for(to));
  }
  // Runs fn (a registered function or class name) on `to` and keeps the result there.
  // Returns at once; the RRef is usable right away (calls queue behind the construction).
  template <typename T, typename... Args>
  RRef<T> remote(const Target& to, const std::string& fn, const Args&... args) {
    detail::Header h;
    h.fn = fn;
    return RRef<T>(detail::remote_call(engine_, engine_->resolve(to), std::move(h), detail::args_writer(args...),
                                       engine_->timeout_for(to)));
  }

  // An RRef owned by this worker to an object it already holds (torch's RRef(value)): send it
  // to peers like any other. T = at::Tensor (a parameter, say) can be fetched with to_here().
  template <typename T>
  RRef<T> make_rref(std::shared_ptr<T> value) {
    std::function<void(const void*, detail::Packer&)> pack;
    if constexpr (std::is_same_v<T, at::Tensor>) pack = detail::packer_for<T>();
    auto s = std::make_shared<detail::RRefState>();
    s->core = engine_;
    s->owner = engine_->rank();
    s->id = s->fork = engine_->adopt_object(std::move(value), typeid(T), std::move(pack));
    s->created = Future<void>::ready();
    return RRef<T>(std::move(s));
  }

  // The seam for a layer that follows tensors across the wire (distributed autograd): see
  // transport/wire/message_hooks.h. Call in the setup callback; one set of hooks per agent.
  void set_hooks(std::shared_ptr<MessageHooks> hooks);
  MessageHooks* hooks() const;
  // fn runs on the I/O thread after each round in which it read messages: by then every request
  // that had arrived has been handed to its handler (RunOn::IoThread ones have run). For a
  // RunOn::IoThread handler that queues its requests: answer the queue here, and requests that
  // arrived together are answered together without waiting for more. Must return at once;
  // what it throws is counted and logged. Call in the setup callback; one per agent.
  void after_requests_read(std::function<void()> fn);

  // For a worker that only serves (a shard's owner, a parameter server): returns once `who`
  // has called shutdown() -- however long its run takes -- and throws TransportError naming it
  // as soon as its connection drops. Then call shutdown(), whose own bound (shutdown_timeout)
  // is for the last calls, not for the length of the run.
  void serve_until_shutdown(const Target& who);
  // True once `who` has called shutdown(): the same wait, polled, for a worker that serves
  // several peers and must notice each one's end (or loss, connection_lost) in any order.
  bool has_shut_down(const Target& who);

  // Graceful: waits until every worker has called shutdown() and all their calls are done
  // (like torch's rpc.shutdown()), then stops. Throws TimeoutError if peers never arrive
  // (after stopping anyway). Idempotent.
  void shutdown();

 private:
  std::shared_ptr<detail::RpcCore> core_;       // the engine (rpc_core.h, private)
  std::shared_ptr<detail::CallEngine> engine_;  // the same object, as the templates see it
};

// register_class<T>("Counter").constructor<int>().method("increment", &Counter::increment);
// register_class<T>("Worker").factory([&agent](Spec s) { return std::make_shared<Worker>(agent, s); });
template <typename T>
class ClassBuilder {
 public:
  ClassBuilder(std::shared_ptr<detail::CallEngine> core, std::string name)
      : core_(std::move(core)), name_(std::move(name)) {
    info_.type = typeid(T);
    info_.type_name = detail::type_name<T>();
  }
  ClassBuilder(ClassBuilder&&) = default;
  ~ClassBuilder() {
    if (core_) core_->add_class(name_, std::move(info_));
  }

  template <typename... A>
  ClassBuilder& constructor() {
    return factory([](A... a) {
      if constexpr (std::is_constructible_v<T, A...>) return std::make_shared<T>(std::move(a)...);
      else return std::make_shared<T>(T{std::move(a)...});  // aggregates
    });
  }
  // Constructs through make(args...) -> std::shared_ptr<T>, for objects that need local
  // context the caller cannot send (this process's RpcAgent, a device, a file).
  template <typename F>
  ClassBuilder& factory(F make) {
    auto c = detail::make_callable<void, F, false>(name_, std::move(make));
    // The constructor's "result" is the object itself, not a shared_ptr to it.
    auto inner = std::move(c.invoke);
    c.invoke = [inner](void* self, const InMessage& m, const std::shared_ptr<detail::CallEngine>& core) {
      return inner(self, m, core).then([](const Future<std::shared_ptr<void>>& f) -> std::shared_ptr<void> {
        return *std::static_pointer_cast<std::shared_ptr<T>>(f.value());
      });
    };
    c.result_type = typeid(T);
    c.result_type_name = info_.type_name;
    core_->add_callable(name_, std::move(c));
    return *this;
  }
  // A member function pointer, or any callable taking T& first.
  template <typename M>
  ClassBuilder& method(const std::string& name, M m) {
    if constexpr (std::is_member_function_pointer_v<M>) {
      info_.methods.emplace_back(name, detail::make_callable<T>(name_ + "." + name, bind_member(m)));
    } else {
      info_.methods.emplace_back(name, detail::make_callable<T>(name_ + "." + name, std::move(m)));
    }
    return *this;
  }
  // Allows RRef<T>::to_here(): T must be msgpack-serializable.
  ClassBuilder& fetchable() {
    info_.pack_object = [](const void* o, detail::Packer& pk) { pk.pack(*static_cast<const T*>(o)); };
    return *this;
  }

 private:
  template <typename R, typename... A>
  static auto bind_member(R (T::*pm)(A...)) {
    return [pm](T& self, A... a) -> R { return (self.*pm)(std::move(a)...); };
  }
  template <typename R, typename... A>
  static auto bind_member(R (T::*pm)(A...) const) {
    return [pm](T& self, A... a) -> R { return (self.*pm)(std::move(a)...); };
  }

  std::shared_ptr<detail::CallEngine> core_;
  std::string name_;
  detail::ClassInfo info_;
};

}  // namespace distrl::transport
