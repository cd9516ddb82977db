#include "transport/detail/zmq_context.h"

#include <mutex>

namespace distrl::transport::detail {

std::shared_ptr<zmq::context_t> shared_zmq_context() {
  static std::mutex mu;
  static std::weak_ptr<zmq::context_t> weak;
  std::lock_guard<std::mutex> lock(mu);
  if (auto ctx = weak.lock()) return ctx;
  auto ctx = std::make_shared<zmq::context_t>(1);
  ctx->set(zmq::ctxopt::blocky, false);  // sockets left open never block context shutdown forever
  weak = ctx;
  return ctx;
}

void apply_common_options(zmq::socket_t& s, int linger_ms) {
  s.set(zmq::sockopt::linger, linger_ms);
  s.set(zmq::sockopt::sndhwm, 100000);
  s.set(zmq::sockopt::rcvhwm, 100000);
}

}  // namespace distrl::transport::detail
