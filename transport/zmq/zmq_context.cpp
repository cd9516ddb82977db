#include "transport/zmq/zmq_context.h"

#include <cerrno>
#include <cstring>
#include <iterator>
#include <mutex>
#include <vector>

#include <zmq_addon.hpp>

#include "common/error.h"

namespace distrl::transport::detail {

namespace {
// The context and, with security on, its guard (transport/bootstrap/security.cpp); the guard's thread
// ends when the context is shut down, and must have closed its sockets before the context is
// terminated.
struct ContextHolder {
  zmq::context_t ctx{1};
  std::shared_ptr<SecurityGuard> guard;
  ~ContextHolder() {
    if (!guard) return;
    ctx.shutdown();
    guard.reset();
  }
};
}  // namespace

std::shared_ptr<zmq::context_t> shared_zmq_context() {
  static std::mutex mu;
  static std::weak_ptr<zmq::context_t> weak;
  std::lock_guard<std::mutex> lock(mu);
  if (auto ctx = weak.lock()) return ctx;
  auto holder = std::make_shared<ContextHolder>();
  holder->ctx.set(zmq::ctxopt::blocky, false);  // sockets left open never block context shutdown forever
  holder->guard = start_security(holder->ctx);
  std::shared_ptr<zmq::context_t> ctx(holder, &holder->ctx);
  weak = ctx;
  return ctx;
}

void apply_common_options(zmq::socket_t& s, int linger_ms) {
  s.set(zmq::sockopt::linger, linger_ms);
  s.set(zmq::sockopt::sndhwm, 100000);
  s.set(zmq::sockopt::rcvhwm, 100000);
}

void watch_connection(zmq::context_t& ctx, zmq::socket_t& dealer, zmq::socket_t& monitor, const std::string& name) {
  dealer.set(zmq::sockopt::heartbeat_ivl, 2000);
  dealer.set(zmq::sockopt::heartbeat_timeout, 10000);
  // Heartbeats start after the ZMTP handshake; a connection opened to a stopped process (the
  // kernel accepts it) never gets that far and was dropped only at libzmq's handshake timeout,
  // 30 s by default (measured: a call to a SIGSTOPped peer failed after ~30 s). Same bound.
  dealer.set(zmq::sockopt::handshake_ivl, 10000);
  const std::string ep = "inproc://distrl-mon-" + name;
  if (zmq_socket_monitor(dealer.handle(), ep.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0)
    throw TransportError("transport: cannot monitor connection " + name);
  monitor = zmq::socket_t(ctx, zmq::socket_type::pair);
  monitor.connect(ep);
}

void read_connection_events(zmq::socket_t& monitor, const std::function<void(int)>& on_event) {
  for (;;) {
    std::vector<zmq::message_t> ev;
    if (!recv_multipart_nointr(monitor, ev, zmq::recv_flags::dontwait)) return;
    if (ev.empty() || ev[0].size() < 2) continue;
    std::uint16_t event;
    std::memcpy(&event, ev[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || event == ZMQ_EVENT_DISCONNECTED) on_event(event);
  }
}

void watch_handshakes(zmq::context_t& ctx, zmq::socket_t& s, zmq::socket_t& monitor, const std::string& name) {
  const std::string ep = "inproc://distrl-hs-" + name;
  const int events =
      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (zmq_socket_monitor(s.handle(), ep.c_str(), events) != 0)
    throw TransportError("transport: cannot monitor the handshakes of " + name);
  monitor = zmq::socket_t(ctx, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(ep);
}

bool handshake_failed(zmq::socket_t& monitor) {
  bool failed = false;
  for (;;) {
    std::vector<zmq::message_t> ev;
    if (!recv_multipart_nointr(monitor, ev, zmq::recv_flags::dontwait)) return failed;
    if (!ev.empty() && ev[0].size() >= 2) failed = true;
  }
}

void unwatch_connection(zmq::socket_t& dealer, zmq::socket_t& monitor) {
  if (dealer.handle()) zmq_socket_monitor(dealer.handle(), nullptr, 0);
  monitor.close();
  dealer.close();
}

Received recv_bounded(zmq::socket_t& s, std::vector<zmq::message_t>& out, std::size_t max_parts) {
  out.clear();
  bool too_many = false;
  for (;;) {
    zmq::message_t part;
    const auto got = recv_nointr(s, part, out.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!got) return Received::Nothing;  // only the first part can be missing (parts arrive together)
    const bool more = part.more();
    if (out.size() < max_parts) out.push_back(std::move(part));
    else too_many = true;
    if (!more) break;
  }
  return too_many ? Received::TooManyParts : Received::Message;
}

namespace {
template <typename F>
auto retry_eintr(F&& f) {
  for (;;) {
    try {
      return f();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}
}  // namespace

std::optional<std::size_t> recv_nointr(zmq::socket_t& s, zmq::message_t& m, zmq::recv_flags flags) {
  return retry_eintr([&]() -> std::optional<std::size_t> { return s.recv(m, flags); });
}

std::optional<std::size_t> send_nointr(zmq::socket_t& s, zmq::message_t& m, zmq::send_flags flags) {
  return retry_eintr([&]() -> std::optional<std::size_t> { return s.send(m, flags); });
}

std::optional<std::size_t> send_nointr(zmq::socket_t& s, zmq::const_buffer b, zmq::send_flags flags) {
  return retry_eintr([&]() -> std::optional<std::size_t> { return s.send(b, flags); });
}

namespace {
// A multipart message, each part made a ZeroMQ message by `message(i)` as it is sent.
template <typename Message>
bool send_parts(zmq::socket_t& s, std::size_t n, zmq::send_flags flags, Message&& message) {
  for (std::size_t i = 0; i < n; ++i) {
    const auto more = i + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none;
    const auto f = i == 0 ? flags | more : (flags & zmq::send_flags::dontwait) | more;
    if (!send_nointr(s, message(i), f)) {
      if (i == 0) return false;
      // Not after the first part: ZeroMQ admits a message's parts together.
      throw zmq::error_t();
    }
  }
  return true;
}
}  // namespace

bool send_multipart_nointr(zmq::socket_t& s, std::vector<zmq::message_t>& parts, zmq::send_flags flags) {
  return send_parts(s, parts.size(), flags, [&](std::size_t i) -> zmq::message_t& { return parts[i]; });
}

zmq::message_t to_message(const Frame& f) {
  FrameBlock* block = f.retain();
  if (!block) return zmq::message_t(f.data(), f.size());  // inline: a few bytes, copied
  try {
    return zmq::message_t(
        const_cast<void*>(f.data()), f.size(),
        [](void*, void* hint) { Frame::release(static_cast<FrameBlock*>(hint)); }, block);
  } catch (...) {  // ENOMEM: ZeroMQ never took the reference
    Frame::release(block);
    throw;
  }
}

Frame to_frame(zmq::message_t&& m) {
  // Stable when moved: only messages of up to 33 bytes (libzmq's ZMQ_MAX_VSM_SIZE) keep their
  // bytes inside the message object, and those are copied below (Frame::kInline is 40).
  static_assert(Frame::kInline >= 33, "ZeroMQ's inline messages must be copied, not shared");
  const void* data = m.data();
  const std::size_t size = m.size();
  if (size <= Frame::kInline) return Frame(data, size);
  return Frame::sharing(data, size, std::move(m));
}

bool send_frames_nointr(zmq::socket_t& s, const Frames& frames, zmq::send_flags flags) {
  zmq::message_t part;
  return send_parts(s, frames.size(), flags, [&](std::size_t i) -> zmq::message_t& {
    part = to_message(frames[i]);
    return part;
  });
}

Received recv_bounded(zmq::socket_t& s, Frames& out, std::size_t max_parts) {
  thread_local std::vector<zmq::message_t> parts;  // kept: no allocation per message
  const Received got = recv_bounded(s, parts, max_parts);
  out.clear();
  if (got == Received::Message) {
    out.reserve(parts.size());
    for (auto& p : parts) out.push_back(to_frame(std::move(p)));
  }
  parts.clear();  // a dropped message's parts go now, not at this thread's next read
  return got;
}

bool recv_multipart_nointr(zmq::socket_t& s, std::vector<zmq::message_t>& parts, zmq::recv_flags flags) {
  parts.clear();
  for (;;) {
    zmq::message_t part;
    if (!recv_nointr(s, part, parts.empty() ? flags : zmq::recv_flags::none)) return false;  // only the first
    const bool more = part.more();
    parts.push_back(std::move(part));
    if (!more) return true;
  }
}

int poll_nointr(zmq::pollitem_t* items, std::size_t count, std::chrono::milliseconds timeout) {
  try {
    return zmq::poll(items, count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    for (std::size_t i = 0; i < count; ++i) items[i].revents = 0;
    return 0;
  }
}

}  // namespace distrl::transport::detail
