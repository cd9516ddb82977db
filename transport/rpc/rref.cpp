// RRef reference counting. The owner keeps, per object, the set of live forks (one per holder
// reference). A holder that passes an RRef on creates a fork: it tells the owner (or records it
// itself when it is the owner) and keeps its own reference alive until the owner has the new
// fork, so the set cannot run empty while a reference is in flight. A release that overtakes
// its fork notice is remembered and cancels it. Set semantics make any arrival order safe.
#include "transport/rpc/rref.h"

#include "transport/rpc/detail/rpc_state.h"
#include "transport/wire/detail/le_bytes.h"
#include "transport/wire/detail/wire_codec.h"

namespace distrl::transport::detail {
namespace {

constexpr std::size_t kRRefDescBytes = 4 + 8 + 8;  // owner rank, object id, fork id

}  // namespace

RRefState::~RRefState() {
  if (auto c = core.lock()) {
    try {
      c->release_rref(owner, id, fork);
    } catch (const std::exception& e) {
      DISTRL_LOG(Warn, "rref: release of object " << id << " failed: " << e.what());
    }
  }
}

std::string pack_rref_descriptor(const std::shared_ptr<RRefState>& s) {
  if (!s) throw ProtocolError("rref: cannot send an empty RRef");
  int dest = -1;
  CallEngine* agent = current_pack_agent(&dest);
  if (!agent) throw ProtocolError("rref: an RRef can only be packed inside an RPC message");
  const std::uint64_t fork = agent->fork_rref(s->owner, s->id, s, dest);  // dest will hold it
  std::string d;
  put_le(d, static_cast<std::uint32_t>(s->owner), 4);
  put_le(d, s->id, 8);
  put_le(d, fork, 8);
  return d;
}

std::shared_ptr<RRefState> unpack_rref_descriptor(const msgpack::object& o) {
  if (o.type != msgpack::type::EXT || o.via.ext.type() != kRRefExt) throw msgpack::type_error();
  if (o.via.ext.size != kRRefDescBytes)
    throw ProtocolError("rref descriptor is " + std::to_string(o.via.ext.size) + " bytes, expected " +
                        std::to_string(kRRefDescBytes));
  auto core = current_unpack_agent();
  if (!core) throw ProtocolError("rref: an RRef can only be decoded inside an RPC message");
  const char* p = o.via.ext.data();
  auto s = std::make_shared<RRefState>();
  s->owner = static_cast<int>(get_le(p, 4));
  s->id = get_le(p + 4, 8);
  s->fork = get_le(p + 12, 8);
  if (s->owner < 0 || s->owner >= core->world_size())
    throw ProtocolError("rref descriptor names owner rank " + std::to_string(s->owner) + ", world size is " +
                        std::to_string(core->world_size()));
  s->core = core;
  Promise<void> ready;
  ready.set_value();
  s->created = ready.get_future();
  return s;
}

std::uint64_t RpcCore::fork_rref(int owner, std::uint64_t id, std::shared_ptr<const void> keep, int holder) {
  const std::uint64_t fork = new_object_id();
  if (owner == s_->rank) {
    s_->objects.add_fork(id, fork, holder);
    return fork;
  }
  Header h;
  h.fn = kForkFn;
  std::tuple<std::uint64_t, std::uint64_t, std::int32_t> ids{id, fork, holder};
  // keep (the parent reference) lives in the completion until the owner has recorded the fork.
  call(
      owner, std::move(h), [&](Packer& pk) { pk.pack(ids); },
      [keep](InMessage*, std::exception_ptr err) {
        if (err) DISTRL_LOG(Warn, "rref: fork notice failed; the object may be freed early");
      },
      s_->opts.rpc_timeout);
  return fork;
}

std::uint64_t RpcCore::adopt_object(std::shared_ptr<void> value, std::type_index type,
                                    std::function<void(const void*, Packer&)> pack) {
  const std::uint64_t id = new_object_id();
  s_->objects.adopt(id, std::move(value), type, std::move(pack), s_->rank);
  return id;
}

void RpcCore::release_rref(int owner, std::uint64_t id, std::uint64_t fork) {
  auto& s = *s_;
  if (!s.running.load()) return;  // the group is gone; owners dropped their objects
  if (owner == s.rank) {
    (void)s.objects.release(id, fork, s.rank);  // a last reference goes here, outside the table's lock
    return;
  }
  Header h;
  h.kind = Kind::Control;
  h.src = s.rank;
  h.fn = kReleaseFn;
  std::tuple<std::uint64_t, std::uint64_t> ids{id, fork};
  Frames frames = encode_message(build_message(h, this, owner, [&](Packer& pk) { pk.pack(ids); }));
  std::string err;
  (void)s.link->send_any_thread(owner, frames, &err);  // a dead owner has nothing left to free
}

std::shared_ptr<void> RpcCore::local_object(std::uint64_t id, std::type_index type, std::chrono::milliseconds timeout) {
  return s_->objects.local(id, type, timeout);
}

}  // namespace distrl::transport::detail
