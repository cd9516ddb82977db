// RRef<T>: a reference to an object of type T owned by one worker (its owner), like
// torch.distributed.rpc.RRef. Copyable and sendable: an RRef inside RPC arguments or results
// arrives as a usable RRef on the other side. The owner keeps the object until every holder
// (every live RRef anywhere) has released it, or the group shuts down. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "transport/rpc/detail/callable.h"

namespace distrl::transport {

namespace detail {

// One holder's reference: released (a message to the owner) when the last copy goes away.
struct RRefState {
  std::weak_ptr<CallEngine> core;
  int owner = -1;
  std::uint64_t id = 0;
  std::uint64_t fork = 0;
  Future<void> created;  // the owner's answer to remote(); ready for received RRefs
  ~RRefState();
};

// Sends a request that creates an object on owner (h.fn names a function, class or method)
// and returns the creator's reference to it, usable at once.
inline std::shared_ptr<RRefState> remote_call(const std::shared_ptr<CallEngine>& core, int owner, Header h,
                                              const BodyWriter& body, std::chrono::milliseconds timeout) {
  auto s = std::make_shared<RRefState>();
  s->core = core;
  s->owner = owner;
  s->id = s->fork = core->new_object_id();  // the creator's fork id is the object id
  h.new_obj = s->id;
  s->created = call_async<void>(core, owner, std::move(h), body, timeout);
  return s;
}

std::string pack_rref_descriptor(const std::shared_ptr<RRefState>& s);
std::shared_ptr<RRefState> unpack_rref_descriptor(const msgpack::object& o);

}  // namespace detail

template <typename T>
class RRef {
 public:
  RRef() = default;
  explicit RRef(std::shared_ptr<detail::RRefState> s) : state_(std::move(s)) {}

  bool valid() const { return state_ != nullptr; }
  int owner_rank() const { return state_->owner; }
  std::string owner_name() const { return core()->workers().at(state_->owner).name; }
  bool is_owner() const { return core()->rank() == state_->owner; }
  std::uint64_t id() const { return state_->id; }
  // Completes when the owner has created the object (fails if its constructor threw).
  Future<void> created() const { return state_->created; }

  // The owned object itself; only on the owner (waits for its construction).
  std::shared_ptr<T> local_value(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const {
    auto c = core();
    if (c->rank() != state_->owner)
      throw Error("RRef::local_value: object " + std::to_string(state_->id) + " is owned by " + owner_name() +
                  ", not by this worker; use to_here() or a method call");
    return std::static_pointer_cast<T>(
        c->local_object(state_->id, typeid(T), timeout.count() ? timeout : c->options().rpc_timeout));
  }

  // A copy of the object, fetched from the owner (T must be serializable, the class fetchable).
  Future<T> to_here_async(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const {
    return call<T>("__rref_fetch", timeout, detail::args_writer());
  }
  T to_here(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const {
    return to_here_async(timeout).value();
  }

  // Calls a registered method on the owned object, on the owner.
  template <typename R, typename... Args>
  Future<R> rpc_async(const std::string& method, const Args&... args) const {
    return call<R>(method, std::chrono::milliseconds(0), detail::args_writer(args...));
  }
  template <typename R, typename... Args>
  R rpc_sync(const std::string& method, const Args&... args) const {
    auto c = core();
    detail::Header h;
    h.fn = method;
    h.obj = state_->id;
    return detail::call_sync<R>(c, state_->owner, std::move(h), detail::args_writer(args...), c->options().rpc_timeout);
  }
  // Runs a method on the owner and keeps its result there, as a new RRef.
  template <typename U, typename... Args>
  RRef<U> remote(const std::string& method, const Args&... args) const {
    auto c = core();
    detail::Header h;
    h.fn = method;
    h.obj = state_->id;
    return RRef<U>(
        detail::remote_call(c, state_->owner, std::move(h), detail::args_writer(args...), c->options().rpc_timeout));
  }

  const std::shared_ptr<detail::RRefState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::CallEngine> core() const {
    if (!state_) throw Error("RRef: empty reference");
    auto c = state_->core.lock();
    if (!c) throw TransportError("RRef: the RPC agent of this reference has shut down");
    return c;
  }
  template <typename R>
  Future<R> call(const std::string& method, std::chrono::milliseconds timeout, const detail::BodyWriter& body) const {
    auto c = core();
    detail::Header h;
    h.fn = method;
    h.obj = state_->id;
    return detail::call_async<R>(c, state_->owner, std::move(h), body,
                                 timeout.count() ? timeout : c->options().rpc_timeout);
  }

  std::shared_ptr<detail::RRefState> state_;
};

}  // namespace distrl::transport

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <typename T>
  struct pack<distrl::transport::RRef<T>> {
    template <typename Stream>
    packer<Stream>& operator()(packer<Stream>& o, const distrl::transport::RRef<T>& r) const {
      std::string desc = distrl::transport::detail::pack_rref_descriptor(r.state());
      o.pack_ext(desc.size(), distrl::transport::kRRefExt);
      o.pack_ext_body(desc.data(), static_cast<uint32_t>(desc.size()));
      return o;
    }
  };

  template <typename T>
  struct convert<distrl::transport::RRef<T>> {
    const msgpack::object& operator()(const msgpack::object& o, distrl::transport::RRef<T>& r) const {
      r = distrl::transport::RRef<T>(distrl::transport::detail::unpack_rref_descriptor(o));
      return o;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
