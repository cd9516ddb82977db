// The process's ZeroMQ context, shared by every socket owner and terminated when the last
// owner lets go. Private to transport/.
#pragma once

#include <memory>

#include <zmq.hpp>

namespace distrl::transport::detail {

std::shared_ptr<zmq::context_t> shared_zmq_context();

// Socket options every distrl socket gets: finite linger, explicit high-water marks.
void apply_common_options(zmq::socket_t& s, int linger_ms = 200);

}  // namespace distrl::transport::detail
