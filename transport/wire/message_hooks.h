// The one seam between the RPC layer and a layer that follows tensors across the wire
// (distributed autograd, autograd/). The transport knows nothing of autograd: it carries a
// context id, a message id and the list of tensor frames that "require grad" in each message's
// header (transport/README.md), and calls these hooks at four points. Install one with
// RpcAgent::set_hooks in the agent's setup callback, before any peer can send.
//
// Threads: current_context and on_send run on the thread that sends (a caller's thread for a
// request; the thread that completes a handler for its reply); on_receive on the thread that
// converts a received body (a handler's pool thread, or the thread reading an RPC result);
// enter on the handler's thread; on_peer_down on the I/O thread (must not block). Every hook
// may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace distrl::transport {

struct OutFrame;  // serialize.h

// What a message carries for the hooks: header fields "ctx", "am" and "rg".
struct MessageTag {
  std::int64_t ctx = -1;                   // context id (-1: none)
  std::int64_t msg = -1;                   // the sender's message id (-1: nothing recorded)
  std::vector<std::uint32_t> grad_frames;  // tensor frames (1-based) whose tensors require grad
};

class MessageHooks {
 public:
  virtual ~MessageHooks() = default;
  // The context a request sent now from this thread carries (-1: none).
  virtual std::int64_t current_context() = 0;
  // A message of context `ctx` to rank `dest` was packed with `frames` (frame i + 1 is
  // frames[i]; a tensor's frame has OutFrame::tensor set): record what must be recorded and
  // fill tag->msg and tag->grad_frames. May throw: a request then fails at its caller, a reply
  // is answered with the error instead.
  virtual void on_send(std::int64_t ctx, int dest, const std::vector<OutFrame>& frames, MessageTag* tag) = 0;
  // Tensor `t` of frame `frame` of a message tagged `tag` from rank `src`, listed in
  // tag.grad_frames, is being handed to user code: returns the tensor to hand over. Called at
  // most once per frame of a message; may throw (the message's conversion fails with it).
  virtual at::Tensor on_receive(const MessageTag& tag, int src, std::uint32_t frame, at::Tensor t) = 0;
  // A request of context ctx from rank src is about to run its handler on this thread: the
  // context is current until the returned object is destroyed (after the handler returns).
  // May throw: the request is answered with the error, its handler never runs.
  virtual std::shared_ptr<void> enter(std::int64_t ctx, int src) = 0;
  // The connection to rank `rank` dropped (the process exited or crashed, or it was stopped or
  // its host unreachable: no heartbeat for 10 s).
  virtual void on_peer_down(int rank, const std::string& why) = 0;
};

}  // namespace distrl::transport
