// The RPC agent's engine, behind RpcAgent; RRef and the typed templates reach it only through
// CallEngine (call_engine.h), which it implements. It owns its link to
// the peers (transport/link/link.h: one I/O thread, every connection; ZeroMQ's IoLoop or the
// shared-memory ShmLink, both made and bound by link/world_links.h and one kept, or both as a
// PairLink, once the world's addresses say which), the handler pool and the owned parts of its State (registry,
// object table, peer table, call table, channel pool: rpc_state.h). Private to transport/ and not
// installed: the public face is RpcAgent.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "transport/runtime/future.h"
#include "transport/rpc/options.h"
#include "transport/wire/detail/message.h"
#include "transport/rpc/detail/call_engine.h"

namespace distrl::transport {
class Store;
}  // namespace distrl::transport

namespace distrl::transport::detail {

class RpcCore final : public CallEngine, public std::enable_shared_from_this<RpcCore> {
 public:
  explicit RpcCore(RpcOptions options);
  ~RpcCore() override;
  RpcCore(const RpcCore&) = delete;
  RpcCore& operator=(const RpcCore&) = delete;

  // Rendezvous, bind, start threads; before_publish runs before peers learn our address.
  void start(const std::function<void()>& before_publish);
  void shutdown(bool graceful);  // see RpcAgent::shutdown
  bool running() const;

  const RpcOptions& options() const override;
  int rank() const override;
  int world_size() const override;
  std::int64_t incarnation() const;  // see RpcAgent::incarnation
  const std::vector<WorkerInfo>& workers() const override;
  int resolve(const Target& to) const override;    // throws Error for an unknown worker
  bool connection_lost(int rank) const;            // see RpcAgent::connection_lost
  std::uint64_t connection_drops(int rank) const;  // see RpcAgent::connection_drops
  void watch(int rank);                            // see RpcAgent::watch
  void serve_until_shutdown(int rank);             // see RpcAgent::serve_until_shutdown
  bool has_shut_down(int rank);                    // see RpcAgent::has_shut_down
  std::chrono::milliseconds timeout_for(const Target& to) const override;
  Executor* callback_executor() override;
  RpcStats stats() const;
  Store& store();

  void add_callable(const std::string& name, Callable c) override;
  void set_hooks(std::shared_ptr<MessageHooks> hooks);  // see RpcAgent::set_hooks
  MessageHooks* hooks() const;
  void after_requests_read(std::function<void()> fn);  // see RpcAgent::after_requests_read
  // An owner reference to a local object (see RpcAgent::make_rref).
  std::uint64_t adopt_object(std::shared_ptr<void> value, std::type_index type,
                             std::function<void(const void*, Packer&)> pack) override;
  void add_class(const std::string& name, ClassInfo info) override;

  // Sends a request (kind Request, call id assigned here) and arranges for done to run once.
  void call(int dest, Header h, const BodyWriter& body, Completion done, std::chrono::milliseconds timeout) override;
  // The synchronous fast path (rpc_sync): sends on a channel of its own (a DEALER the calling
  // thread holds for this call) and waits on it itself, so neither the request nor the reply
  // passes through the I/O loop. `done` runs once, on the calling thread, before this returns.
  // Timeouts, a peer's death (seen by the I/O loop), malformed replies and shutdown fail the
  // call as they fail call()'s. Must not run on the I/O thread (nothing may wait there).
  void call_sync(int dest, Header h, const BodyWriter& body, const Completion& done,
                 std::chrono::milliseconds timeout) override;

  // RRef support.
  std::uint64_t new_object_id() override;
  std::shared_ptr<void> local_object(std::uint64_t id, std::type_index type,
                                     std::chrono::milliseconds timeout) override;
  // Registers a new fork of (owner, id) for a message to `holder` (the rank that will hold
  // it, and the only one whose release of it the owner accepts); keep stays alive until the
  // owner has recorded it. Returns the fork id to put on the wire.
  std::uint64_t fork_rref(int owner, std::uint64_t id, std::shared_ptr<const void> keep, int holder) override;
  void release_rref(int owner, std::uint64_t id, std::uint64_t fork) override;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace distrl::transport::detail
