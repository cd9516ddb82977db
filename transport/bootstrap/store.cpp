#include "transport/bootstrap/store.h"

#include <atomic>
#include <climits>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include <msgpack.hpp>
#include <zmq_addon.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "transport/bootstrap/detail/store_core.h"
#include "transport/zmq/zmq_context.h"

namespace distrl::transport {

// ---------------------------------------------------------------- server

StoreLimits StoreLimits::parse(const std::string& text) {
  StoreLimits l;
  std::stringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    double v = -1;
    if (eq != std::string::npos) {
      try {
        std::size_t used = 0;
        v = std::stod(item.substr(eq + 1), &used);
        if (used != item.size() - eq - 1) v = -1;
      } catch (const std::exception&) {}
    }
    if (key != "keys" && key != "mb" && key != "value_mb" && key != "waiters")
      throw ConfigError("store limits: unknown key '" + key + "' in '" + text +
                        "' (known: keys, mb, value_mb, waiters)");
    const bool megabytes = key == "mb" || key == "value_mb";
    if (!(v > 0 && v <= 1e9) || (!megabytes && v != std::floor(v)))
      throw ConfigError("store limits: '" + item + "' is not " + key + "=" + (megabytes ? "MB" : "COUNT") +
                        " with a positive " + (megabytes ? "number" : "whole number") +
                        " up to 1e9 (e.g. mb=256,value_mb=8)");
    if (key == "keys") l.max_keys = static_cast<std::size_t>(v);
    else if (key == "mb") l.max_bytes = static_cast<std::size_t>(v * (1 << 20));
    else if (key == "value_mb") l.max_value_bytes = static_cast<std::size_t>(v * (1 << 20));
    else l.max_waiters = static_cast<std::size_t>(v);
  }
  return l;
}

StoreLimits StoreLimits::from_env() {
  const char* text = std::getenv("DISTRL_STORE_LIMITS");
  if (!text) return {};
  try {
    return parse(text);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("DISTRL_STORE_LIMITS: ") + e.what());
  }
}

struct StoreServer::Impl {
  std::shared_ptr<zmq::context_t> ctx = detail::shared_zmq_context();
  zmq::socket_t router{*ctx, zmq::socket_type::router};
  zmq::socket_t wake_pull{*ctx, zmq::socket_type::pair};
  zmq::socket_t wake_push{*ctx, zmq::socket_type::pair};
  std::string bound;
  std::thread thread;
  detail::StoreCore core;

  explicit Impl(StoreLimits limits)
      : core(limits, [this](const std::string& peer, std::string&& reply) {
          std::vector<zmq::message_t> msg;
          msg.emplace_back(peer.data(), peer.size());
          msg.emplace_back(reply.data(), reply.size());
          (void)detail::send_multipart_nointr(router, msg, zmq::send_flags::dontwait);
        }) {}

  void run() {
    try {
      for (;;) {
        zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0}, {wake_pull.handle(), 0, ZMQ_POLLIN, 0}};
        detail::poll_nointr(items, 2, core.next_timeout(detail::StoreClock::now(), std::chrono::milliseconds(1000)));
        if (items[1].revents & ZMQ_POLLIN) return;
        if (items[0].revents & ZMQ_POLLIN) {
          for (int i = 0; i < 256; ++i) {
            std::vector<zmq::message_t> frames;
            const auto got = detail::recv_bounded(router, frames, 3);  // [peer, request]; a third marks it bad
            if (got == detail::Received::Nothing) break;
            if (got != detail::Received::Message || frames.size() != 2) {
              core.warn("dropped a malformed request (" + std::to_string(frames.size()) + " frames)");
              continue;
            }
            core.on_request(frames[0].to_string(), static_cast<const char*>(frames[1].data()), frames[1].size());
          }
        }
        core.expire(detail::StoreClock::now());
      }
    } catch (const std::exception& e) {
      DISTRL_LOG(Error, "store server stopped: " << e.what());
    }
  }
};

StoreServer::StoreServer(const std::string& endpoint, StoreLimits limits) : impl_(std::make_unique<Impl>(limits)) {
  detail::apply_common_options(impl_->router, 0);
  detail::secure_server(*impl_->ctx, impl_->router);
  // A request carries at most one value plus its keys; anything far bigger is refused by ZeroMQ.
  impl_->router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_value_bytes + (64 << 10)));
  try {
    impl_->router.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError("store: cannot bind " + endpoint + ": " + e.what() +
                         " (is the port in use? pick another MASTER_PORT)");
  }
  impl_->bound = impl_->router.get(zmq::sockopt::last_endpoint);
  std::string wake = "inproc://distrl-store-" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
  impl_->wake_pull.bind(wake);
  impl_->wake_push.connect(wake);
  impl_->thread = std::thread([this] {
    name_this_thread("distrl-store");
    impl_->run();
  });
}

StoreServer::~StoreServer() {
  zmq::message_t wake;
  (void)detail::send_nointr(impl_->wake_push, wake, zmq::send_flags::dontwait);
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string StoreServer::endpoint() const { return impl_->bound; }

// ---------------------------------------------------------------- client

struct Store::Impl {
  std::shared_ptr<zmq::context_t> ctx = detail::shared_zmq_context();
  zmq::socket_t dealer{*ctx, zmq::socket_type::dealer};
  zmq::socket_t handshakes;  // failed handshakes of dealer: the reason a store never answers
  bool refused = false;
  std::string endpoint;
  std::chrono::milliseconds timeout;
  std::mutex mu;
  std::uint64_t next_id = 1;

  // wait: how long the server may hold the request; slack: extra time for the answer to come.
  detail::StoreReply request(detail::StoreRequest q, std::chrono::milliseconds wait, const std::string& what,
                             std::chrono::milliseconds slack = std::chrono::milliseconds(2000)) {
    std::lock_guard<std::mutex> lock(mu);
    q.id = next_id++;
    q.timeout_ms = wait.count();
    zmq::message_t request(detail::pack_store_message(q));
    if (!detail::send_nointr(dealer, request, zmq::send_flags::dontwait))
      throw TransportError("store " + endpoint + ": send queue full during " + what);
    // The server answers waits itself at their deadline; allow it a little slack.
    const auto deadline = detail::StoreClock::now() + wait + slack;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::StoreClock::now());
      if (left.count() <= 0) break;
      zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
      detail::poll_nointr(&item, 1, left);
      if (!(item.revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      if (!detail::recv_nointr(dealer, m, zmq::recv_flags::dontwait)) continue;
      detail::StoreReply r;
      if (!detail::unpack_store_message(static_cast<const char*>(m.data()), m.size(), &r) || r.id != q.id)
        continue;  // a stale answer to a timed-out request
      if (r.status == detail::kStoreTimedOut) break;
      if (r.status != detail::kStoreOk) throw TransportError("store " + endpoint + ": " + what + ": " + r.value);
      return r;
    }
    refused = refused || detail::handshake_failed(handshakes);
    if (refused)
      throw TransportError("store " + endpoint + ": " + what +
                           ": the store refused this process's handshake: one side "
                           "runs with security: curve and the other does not, or their key files differ (give every "
                           "process the same security and security_key; docs/security.md)");
    throw TimeoutError("store " + endpoint + ": " + what + " timed out after " +
                       std::to_string((wait + slack).count()) +
                       " ms (are all ranks started, and MASTER_ADDR/MASTER_PORT the same everywhere?)");
  }
};

Store::Store(const std::string& endpoint, std::chrono::milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  impl_->endpoint = endpoint;
  impl_->timeout = timeout;
  detail::apply_common_options(impl_->dealer, 0);
  detail::secure_client(impl_->dealer);
  static std::atomic<int> stores{0};
  detail::watch_handshakes(*impl_->ctx, impl_->dealer, impl_->handshakes, "store-" + std::to_string(++stores));
  impl_->dealer.set(zmq::sockopt::maxmsgsize, int64_t{8 << 20});
  impl_->dealer.connect(endpoint);
}

Store::~Store() = default;

namespace {
std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (std::size_t i = 0; i < keys.size() && i < 4; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > 4) s += ", ... (" + std::to_string(keys.size()) + " keys)";
  return s;
}
}  // namespace

// set, add and check are answered at once: the whole timeout is the answer's slack.
void Store::set(const std::string& key, const std::string& value) { set(key, value, impl_->timeout); }
void Store::set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) {
  impl_->request({detail::kStoreSet, 0, {key}, value, 0, 0}, std::chrono::milliseconds(0), "set(" + key + ")", timeout);
}
std::string Store::get(const std::string& key) { return get(key, impl_->timeout); }
std::string Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  return impl_->request({detail::kStoreGet, 0, {key}, {}, 0, 0}, timeout, "get(" + key + ")").value;
}
std::int64_t Store::add(const std::string& key, std::int64_t delta) {
  return impl_
      ->request({detail::kStoreAdd, 0, {key}, {}, delta, 0}, std::chrono::milliseconds(0), "add(" + key + ")",
                impl_->timeout)
      .number;
}
void Store::wait(const std::vector<std::string>& keys) { wait(keys, impl_->timeout); }
void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  impl_->request({detail::kStoreWait, 0, keys, {}, 0, 0}, timeout, "wait(" + join_keys(keys) + ")");
}
bool Store::check(const std::vector<std::string>& keys) { return check(keys, impl_->timeout); }
bool Store::check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return impl_
             ->request({detail::kStoreCheck, 0, keys, {}, 0, 0}, std::chrono::milliseconds(0),
                       "check(" + join_keys(keys) + ")", timeout)
             .number != 0;
}
bool Store::ping(std::chrono::milliseconds timeout) {
  try {
    impl_->request({detail::kStorePing, 0, {}, {}, 0, 0}, std::chrono::milliseconds(0), "ping", timeout);
    return true;
  } catch (const TransportError&) {
    if (impl_->refused) throw;  // a store is there, but it refused us: say why, do not look further
    return false;
  }
}
const std::string& Store::endpoint() const { return impl_->endpoint; }
std::chrono::milliseconds Store::timeout() const { return impl_->timeout; }

}  // namespace distrl::transport
