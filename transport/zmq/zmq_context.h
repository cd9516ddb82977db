// The process's ZeroMQ context, shared by every socket owner and terminated when the last
// owner lets go. Private to transport/.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "transport/wire/detail/frames.h"

namespace distrl::transport::detail {

// With security on (transport/bootstrap/security.h) it also runs the ZAP handler and handshake monitors.
std::shared_ptr<zmq::context_t> shared_zmq_context();

// CURVE (transport/bootstrap/security.cpp). start_security: the guard of a new context, nullptr while
// security is off; it fixes the process's setting. secure_server (a ROUTER) and secure_client
// (a DEALER) must be called before the socket binds or connects; both do nothing while
// security is off. A secured server's failed handshakes are counted in security_stats().
class SecurityGuard;
std::shared_ptr<SecurityGuard> start_security(zmq::context_t& ctx);
void secure_server(zmq::context_t& ctx, zmq::socket_t& router);
void secure_client(zmq::socket_t& dealer);

// Socket options every distrl socket gets: finite linger, explicit high-water marks.
void apply_common_options(zmq::socket_t& s, int linger_ms = 200);

// A DEALER that watches its connection: heartbeats (every 2 s) notice a peer host that vanished
// or a process that stopped without closing, after 10 s without traffic; a connection whose
// handshake does not finish in 10 s (opened to a stopped process) is dropped too. `monitor` (a
// PAIR) receives its connect/disconnect events. name must be unique in the process.
void watch_connection(zmq::context_t& ctx, zmq::socket_t& dealer, zmq::socket_t& monitor, const std::string& name);
// Reads every queued event from a watch_connection monitor (non-blocking) and calls
// on_event(ZMQ_EVENT_HANDSHAKE_SUCCEEDED or ZMQ_EVENT_DISCONNECTED) for each, in order. (A handshake,
// not a TCP connect: the kernel accepts connections for a stopped process, which is not back.)
void read_connection_events(zmq::socket_t& monitor, const std::function<void(int)>& on_event);
// Receives one multipart message (non-blocking) keeping at most max_parts frames: a longer one
// is read to its end and the rest discarded, so no peer can make a reader hold an unbounded
// number of frames (ZeroMQ's maxmsgsize bounds each frame, not their count). (Received: wire/detail/frames.h.)
Received recv_bounded(zmq::socket_t& s, std::vector<zmq::message_t>& out, std::size_t max_parts);

// A monitor (PAIR) of s's failed handshakes: the server refused our key, or one side runs
// security: curve and the other does not. handshake_failed reads the queued events (non-blocking)
// and returns true once one was a failure. name must be unique in the process.
void watch_handshakes(zmq::context_t& ctx, zmq::socket_t& s, zmq::socket_t& monitor, const std::string& name);
bool handshake_failed(zmq::socket_t& monitor);

// zmq::poll that reports a signal's interruption (EINTR: a SIGINT/SIGTERM handler ran on this
// thread) as "nothing ready" instead of throwing; every caller waits in a loop with its own
// deadline, so it just polls again. Other errors throw zmq::error_t as before.
int poll_nointr(zmq::pollitem_t* items, std::size_t count, std::chrono::milliseconds timeout);

// Sends and receives that retry EINTR. libzmq checks its command mailbox inside a send or
// receive, non-blocking ones too, and reports a signal that lands there as EINTR, which cppzmq
// throws: a SIGTERM during a dontwait recv made a process fail with "Interrupted system call"
// (how often: docs/benchmarks.md, "Measurements behind decisions in the code"). A failed attempt
// leaves the message with the caller, so retrying is exact. Otherwise as cppzmq's: an empty
// result is EAGAIN (nothing there, or a full queue, with dontwait), other errors throw.
std::optional<std::size_t> recv_nointr(zmq::socket_t& s, zmq::message_t& m, zmq::recv_flags flags);
std::optional<std::size_t> send_nointr(zmq::socket_t& s, zmq::message_t& m, zmq::send_flags flags);
std::optional<std::size_t> send_nointr(zmq::socket_t& s, zmq::const_buffer b, zmq::send_flags flags);
// A whole multipart message: the first part with `flags` (false: EAGAIN, nothing sent or
// received), the others after it (ZeroMQ takes or delivers a message's parts together).
bool send_multipart_nointr(zmq::socket_t& s, std::vector<zmq::message_t>& parts, zmq::send_flags flags);
bool recv_multipart_nointr(zmq::socket_t& s, std::vector<zmq::message_t>& parts, zmq::recv_flags flags);

// Where the seam's frames (wire/detail/frames.h) meet ZeroMQ's messages, so that no
// zmq::message_t travels above the ZeroMQ link. A frame's block is shared with ZeroMQ, not
// copied (ZeroMQ releases it when it has sent the bytes); inline bytes are copied. A received
// message larger than a frame's inline room is kept whole, not copied.
zmq::message_t to_message(const Frame& f);
Frame to_frame(zmq::message_t&& m);
// send_multipart_nointr of frames. The frames stay the caller's either way (shared, not moved).
bool send_frames_nointr(zmq::socket_t& s, const Frames& frames, zmq::send_flags flags);
// recv_bounded into frames.
Received recv_bounded(zmq::socket_t& s, Frames& out, std::size_t max_parts);

// Stops the monitor and closes both sockets.
void unwatch_connection(zmq::socket_t& dealer, zmq::socket_t& monitor);

}  // namespace distrl::transport::detail
