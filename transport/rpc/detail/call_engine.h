// CallEngine: the narrow interface through which RpcAgent's and RRef's templates reach the RPC
// engine: resolve a worker, send a call (async or on the sync fast path), register callables and
// classes, own objects for RRefs. RpcCore (rpc_core.h, private and not installed) is the one
// implementation; everything else about the engine (start, shutdown, its threads, links and
// tables) stays behind it. Installed with the public headers. Thread-safe: any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "transport/rpc/detail/call_types.h"
#include "transport/rpc/options.h"
#include "transport/runtime/future.h"
#include "transport/wire/detail/in_message.h"

namespace distrl::transport::detail {

class CallEngine {
 public:
  virtual ~CallEngine() = default;

  virtual const RpcOptions& options() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const std::vector<WorkerInfo>& workers() const = 0;
  virtual int resolve(const Target& to) const = 0;  // throws Error for an unknown worker
  virtual std::chrono::milliseconds timeout_for(const Target& to) const = 0;
  // Where the futures of calls complete (the handler pool).
  virtual Executor* callback_executor() = 0;

  virtual void add_callable(const std::string& name, Callable c) = 0;
  virtual void add_class(const std::string& name, ClassInfo info) = 0;

  // Sends a request (kind Request, call id assigned here) and arranges for done to run once.
  virtual void call(int dest, Header h, const BodyWriter& body, Completion done, std::chrono::milliseconds timeout) = 0;
  // The synchronous fast path (rpc_sync): sends on a channel of the calling thread's own and
  // waits on it; `done` runs once, on the calling thread, before this returns. Not on the I/O
  // thread.
  virtual void call_sync(int dest, Header h, const BodyWriter& body, const Completion& done,
                         std::chrono::milliseconds timeout) = 0;

  // RRef support. An owner reference to a local object (see RpcAgent::make_rref).
  virtual std::uint64_t adopt_object(std::shared_ptr<void> value, std::type_index type,
                                     std::function<void(const void*, Packer&)> pack) = 0;
  virtual std::uint64_t new_object_id() = 0;
  virtual std::shared_ptr<void> local_object(std::uint64_t id, std::type_index type,
                                             std::chrono::milliseconds timeout) = 0;
  // Registers a new fork of (owner, id) for a message to `holder` (the rank that will hold it,
  // and the only one whose release of it the owner accepts); keep stays alive until the owner
  // has recorded it. Returns the fork id to put on the wire.
  virtual std::uint64_t fork_rref(int owner, std::uint64_t id, std::shared_ptr<const void> keep, int holder) = 0;
  virtual void release_rref(int owner, std::uint64_t id, std::uint64_t fork) = 0;
};

}  // namespace distrl::transport::detail
