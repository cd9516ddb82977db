// The process's ZeroMQ context, shared by every socket owner and terminated when the last
// owner lets go. Private to transport/.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace distrl::transport::detail {

std::shared_ptr<zmq::context_t> shared_zmq_context();

// Socket options every distrl socket gets: finite linger, explicit high-water marks.
void apply_common_options(zmq::socket_t& s, int linger_ms = 200);

// A DEALER that watches its connection: heartbeats notice a peer host that vanished without
// closing, and `monitor` (a PAIR) receives its connect/disconnect events. name must be unique
// in the process.
void watch_connection(zmq::context_t& ctx, zmq::socket_t& dealer, zmq::socket_t& monitor, const std::string& name);
// Reads every queued event from a watch_connection monitor (non-blocking) and calls
// on_event(ZMQ_EVENT_CONNECTED or ZMQ_EVENT_DISCONNECTED) for each, in order.
void read_connection_events(zmq::socket_t& monitor, const std::function<void(int)>& on_event);
// Receives one multipart message (non-blocking) keeping at most max_parts frames: a longer one
// is read to its end and the rest discarded, so no peer can make a reader hold an unbounded
// number of frames (ZeroMQ's maxmsgsize bounds each frame, not their count).
enum class Received { Nothing, Message, TooManyParts };
Received recv_bounded(zmq::socket_t& s, std::vector<zmq::message_t>& out, std::size_t max_parts);

// Stops the monitor and closes both sockets.
void unwatch_connection(zmq::socket_t& dealer, zmq::socket_t& monitor);

}  // namespace distrl::transport::detail
