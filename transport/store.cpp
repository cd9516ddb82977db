#include "transport/store.h"

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
#include "transport/detail/store_core.h"
#include "transport/detail/zmq_context.h"

namespace distrl::transport {
namespace detail {
namespace {

// A request carries at most 1024 keys; strings, maps and the whole message are capped too.
const msgpack::unpack_limit kLimits(1024, 16, 1 << 20, 1 << 20, 0, 8);

template <typename T>
std::string pack_any(const T& v) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, v);
  return std::string(buf.data(), buf.size());
}

template <typename T>
bool unpack_any(const char* data, std::size_t size, T* out) {
  try {
    auto h = msgpack::unpack(data, size, nullptr, nullptr, kLimits);
    h.get().convert(*out);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

std::string pack_store_message(const StoreRequest& q) { return pack_any(q); }
std::string pack_store_message(const StoreReply& r) { return pack_any(r); }
bool unpack_store_message(const char* data, std::size_t size, StoreRequest* out) { return unpack_any(data, size, out); }
bool unpack_store_message(const char* data, std::size_t size, StoreReply* out) { return unpack_any(data, size, out); }

// ---------------------------------------------------------------- the state machine

void StoreCore::warn(const std::string& what) {
  ++refused_;
  long held = 0;
  if (log_limit_.allow(&held))
    DISTRL_LOG(Warn, "store: " << what << (held ? " (and " + std::to_string(held) + " more not shown)" : "") << "; "
                               << refused_ << " request(s) refused so far");
}

// Makes room for key = value within the limits, or throws Error naming the bound.
void StoreCore::store_value(const std::string& key, std::string value) {
  if (value.size() > limits_.max_value_bytes)
    throw Error("a value of " + std::to_string(value.size()) + " bytes for key '" + key.substr(0, 64) +
                "' is above the store's max_value_bytes (" + std::to_string(limits_.max_value_bytes) + ")");
  auto it = data_.find(key);
  const std::size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  if (it == data_.end() && data_.size() >= limits_.max_keys)
    throw Error("the store holds max_keys (" + std::to_string(limits_.max_keys) + ") keys");
  if (bytes_ - old + key.size() + value.size() > limits_.max_bytes)
    throw Error("the store would hold more than max_bytes (" + std::to_string(limits_.max_bytes) + ")");
  bytes_ = bytes_ - old + key.size() + value.size();
  if (it == data_.end()) data_.emplace(key, std::move(value));
  else it->second = std::move(value);
}

bool StoreCore::has_all(const std::vector<std::string>& keys) const {
  for (auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

// Answers a get/wait if its keys are there; returns false to keep waiting.
bool StoreCore::try_answer(const std::string& peer, const StoreRequest& q) {
  if (!has_all(q.keys)) return false;
  StoreReply r;
  r.id = q.id;
  if (q.op == kStoreGet) r.value = data_.at(q.keys.at(0));
  reply(peer, r);
  return true;
}

// A new or changed key may satisfy waiters.
void StoreCore::answer_waiters() {
  for (auto it = waiters_.begin(); it != waiters_.end();)
    it = try_answer(it->peer, it->req) ? waiters_.erase(it) : it + 1;
}

// Answers q, or throws Error saying why it cannot (the caller answers that).
void StoreCore::handle(const std::string& peer, const StoreRequest& q) {
  StoreReply r;
  r.id = q.id;
  switch (q.op) {
    case kStoreSet:
      if (q.keys.size() != 1) break;
      store_value(q.keys[0], q.value);
      reply(peer, r);
      answer_waiters();
      return;
    case kStoreAdd: {
      if (q.keys.size() != 1) break;
      auto it = data_.find(q.keys[0]);
      std::int64_t n = 0;
      if (it != data_.end() && !it->second.empty()) {
        const std::string& v = it->second;
        std::size_t used = 0;
        try {
          n = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != v.size())
          throw Error("add(" + q.keys[0].substr(0, 64) + "): the key holds '" + v.substr(0, 32) +
                      "', not a counter (set() it to a number, or use another key)");
      }
      if ((q.delta > 0 && n > INT64_MAX - q.delta) || (q.delta < 0 && n < INT64_MIN - q.delta))
        throw Error("add(" + q.keys[0].substr(0, 64) + "): the counter would overflow");
      n += q.delta;
      store_value(q.keys[0], std::to_string(n));
      r.number = n;
      reply(peer, r);
      answer_waiters();
      return;
    }
    case kStoreGet:
    case kStoreWait:
      if (q.keys.empty() || (q.op == kStoreGet && q.keys.size() != 1)) break;
      if (try_answer(peer, q)) return;
      if (waiters_.size() >= limits_.max_waiters)
        throw Error("the store already holds max_waiters (" + std::to_string(limits_.max_waiters) +
                    ") waiting requests");
      // A wait is bounded by the request's own timeout, clamped to [0, one day].
      waiters_.push_back({peer, q,
                          StoreClock::now() + std::chrono::milliseconds(std::clamp<std::int64_t>(
                                                  q.timeout_ms, 0, std::int64_t{86400} * 1000))});
      return;
    case kStoreCheck:
      r.number = has_all(q.keys) ? 1 : 0;
      reply(peer, r);
      return;
    case kStorePing: reply(peer, r); return;
    default: break;
  }
  r.status = kStoreBad;
  r.value = "bad store request (op " + std::to_string(q.op) + ", " + std::to_string(q.keys.size()) + " keys)";
  reply(peer, r);
}

void StoreCore::on_request(const std::string& peer, const char* data, std::size_t size) {
  StoreRequest q;
  if (!unpack_store_message(data, size, &q)) {
    warn("dropped a malformed request (" + std::to_string(size) + " bytes)");
    return;
  }
  try {
    handle(peer, q);
  } catch (const std::exception& e) {
    warn(e.what());
    StoreReply r;
    r.id = q.id;
    r.status = kStoreBad;
    r.value = e.what();
    reply(peer, r);
  }
}

void StoreCore::expire(StoreClock::time_point now) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    StoreReply r;
    r.id = it->req.id;
    r.status = kStoreTimedOut;
    reply(it->peer, r);
    it = waiters_.erase(it);
  }
}

std::chrono::milliseconds StoreCore::next_timeout(StoreClock::time_point now, std::chrono::milliseconds cap) const {
  auto timeout = cap;
  for (auto& w : waiters_)
    timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(w.deadline - now) +
                                    std::chrono::milliseconds(1));
  return std::max(timeout, std::chrono::milliseconds(0));
}

}  // namespace detail

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
