#include "transport/bootstrap/detail/store_core.h"

#include <climits>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include <msgpack.hpp>

#include "common/error.h"
#include "common/log.h"

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
}  // namespace distrl::transport
