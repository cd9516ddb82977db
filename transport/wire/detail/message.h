// One message as RPC builds it: a message ready to send (OutMessage, built by build_message) and
// the pack scope through which the ext adaptors (tensors, RRefs) reach the message being packed
// on this thread; the received side is in_message.h. The layout is documented in
// transport/README.md. Private to transport/ and not installed (rpc/ and tensor.cpp build on it;
// serialize.h keeps the public wire constants).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "common/error.h"
#include "transport/wire/detail/in_message.h"
#include "transport/wire/message_hooks.h"
#include "transport/wire/serialize.h"

namespace distrl::transport::detail {

// A message ready to send: the packed header (with the body inside) plus frames 1..k.
struct OutMessage {
  msgpack::sbuffer header;
  std::vector<OutFrame> frames;
};

// Collects frames (and RRef forks) while a body is packed; one per thread at a time.
class PackScope {
 public:
  PackScope(std::vector<OutFrame>* frames, CallEngine* agent, int dest_rank);
  ~PackScope();
  PackScope(const PackScope&) = delete;
  PackScope& operator=(const PackScope&) = delete;

  std::vector<OutFrame>* const frames;
  CallEngine* const agent;
  const int dest_rank;

 private:
  PackScope* previous_;
};

// The pack scope of this thread (null outside one): for the ext adaptors (tensors, RRefs).
PackScope* current_pack_scope();
CallEngine* current_pack_agent(int* dest_rank);

// Packs a header map with the body written by write_body(packer).
// With h.ctx >= 0 the header also gets "am" and "rg", filled by hooks->on_send (when given).
template <typename Body>
OutMessage build_message(const Header& h, CallEngine* agent, int dest_rank, Body&& write_body,
                         MessageHooks* hooks = nullptr) {
  OutMessage m;
  Packer pk(m.header);
  const bool has_fn = !h.fn.empty();
  pk.pack_map(6 + has_fn + (h.obj != 0) + (h.new_obj != 0) + (h.ctx >= 0 ? 3 : 0));
  pk.pack("v");
  pk.pack(h.version);
  pk.pack("k");
  pk.pack(static_cast<std::uint8_t>(h.kind));
  pk.pack("id");
  pk.pack(h.call_id);
  pk.pack("src");
  pk.pack(h.src);
  if (has_fn) {
    pk.pack("fn");
    pk.pack(h.fn);
  }
  if (h.obj) {
    pk.pack("obj");
    pk.pack(h.obj);
  }
  if (h.new_obj) {
    pk.pack("new");
    pk.pack(h.new_obj);
  }
  if (h.ctx >= 0) {
    pk.pack("ctx");
    pk.pack(h.ctx);
  }
  pk.pack("a");
  {
    PackScope scope(&m.frames, agent, dest_rank);
    write_body(pk);
  }
  pk.pack("nt");
  pk.pack(static_cast<std::uint32_t>(m.frames.size()));
  if (h.ctx >= 0) {  // what the hooks record about this message's tensors
    MessageTag tag;
    tag.ctx = h.ctx;
    if (hooks) hooks->on_send(h.ctx, dest_rank, m.frames, &tag);
    pk.pack("am");
    pk.pack(tag.msg);
    pk.pack("rg");
    pk.pack(tag.grad_frames);
  }
  return m;
}

}  // namespace distrl::transport::detail
