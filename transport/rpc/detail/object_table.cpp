// RRef reference counting on the owner. Set semantics make any arrival order of fork notices
// and releases safe; a release that overtakes its fork notice is remembered and cancels it.
#include "transport/rpc/detail/object_table.h"

#include <algorithm>
#include <string>
#include <vector>

#include "transport/rpc/detail/registry.h"

namespace distrl::transport::detail {

std::shared_ptr<ObjectTable::Object> ObjectTable::object_locked(std::uint64_t id, bool creating) {
  auto it = objects_.find(id);
  if (it != objects_.end()) return it->second;
  if (!creating) {
    if (unknown_.size() >= opts_.max_unknown_objects) {
      ++unknown_refused_;
      return nullptr;
    }
    unknown_.emplace_back(Clock::now(), id);
  }
  return objects_.emplace(id, std::make_shared<Object>()).first->second;
}

void ObjectTable::add_fork_locked(std::uint64_t id, std::uint64_t fork, int holder) {
  auto o = object_locked(id);
  if (!o) return;
  auto early = o->released_early.find(fork);
  if (early != o->released_early.end() && early->second == holder) o->released_early.erase(early);
  else o->forks[fork] = holder;
}

void ObjectTable::adopt(std::uint64_t id, std::shared_ptr<void> value, std::type_index type, PackFn pack, int owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto o = object_locked(id, /*creating=*/true);  // known from the start: never a placeholder
  o->type = type;
  o->pack = std::move(pack);
  o->constructed_seen = true;
  o->promise.set_value(std::move(value));
  add_fork_locked(id, id, owner);  // the owner's own reference, released like any other
}

void ObjectTable::creating(std::uint64_t id, int creator) {
  std::lock_guard<std::mutex> lock(mu_);
  object_locked(id, /*creating=*/true)->constructed_seen = true;
  add_fork_locked(id, id, creator);  // the creator holds the first reference
}

std::shared_ptr<ObjectTable::Object> ObjectTable::find(std::uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : it->second;
}

void ObjectTable::set_kind(Object& o, std::type_index type, PackFn pack) {
  std::lock_guard<std::mutex> lock(mu_);
  o.type = type;
  o.pack = std::move(pack);
}

std::pair<std::type_index, ObjectTable::PackFn> ObjectTable::kind(const Object& o) const {
  std::lock_guard<std::mutex> lock(mu_);
  return {o.type, o.pack};
}

void ObjectTable::add_fork(std::uint64_t id, std::uint64_t fork, int holder) {
  std::lock_guard<std::mutex> lock(mu_);
  add_fork_locked(id, fork, holder);
}

std::shared_ptr<ObjectTable::Object> ObjectTable::release(std::uint64_t id, std::uint64_t fork, int from) {
  std::lock_guard<std::mutex> lock(mu_);
  auto o = object_locked(id);
  if (!o) return nullptr;
  auto it = o->forks.find(fork);
  if (it == o->forks.end()) {  // its fork notice is still on the way (or the fork never was)
    if (o->released_early.size() < kMaxEarlyReleases) o->released_early.emplace(fork, from);
    else ++releases_refused_;
    return nullptr;
  }
  if (it->second != from) {
    ++releases_refused_;
    return nullptr;
  }
  o->forks.erase(it);
  if (!o->forks.empty() || !o->released_early.empty() || !o->constructed_seen) return nullptr;
  objects_.erase(id);
  return o;
}

std::size_t ObjectTable::park(std::uint64_t obj, int src, std::size_t bytes, int world, const std::string& src_name,
                              std::shared_ptr<Object>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(obj);
  if (it != objects_.end() && it->second->constructed_seen) {
    *out = it->second;
    return 0;
  }
  const std::string none = "no object " + std::to_string(obj) + " on " + opts_.name;
  if (src < 0 || src >= world)
    throw BadCallError(none +
                       " (a call from outside the world never waits for a creation: only members hold "
                       "references whose creation can still be on its way)");
  std::size_t& held = parked_bytes_[src];
  if (held + bytes > opts_.max_parked_bytes || !(*out = object_locked(obj))) {
    const std::string why =
        held + bytes > opts_.max_parked_bytes
            ? "calls of " + src_name + " (rank " + std::to_string(src) + ") waiting for creations hold " +
                  std::to_string(held) + " bytes already and this one has " + std::to_string(bytes) +
                  ": max_parked_bytes is " + std::to_string(opts_.max_parked_bytes)
            : std::to_string(opts_.max_unknown_objects) +
                  " other unknown objects are already waiting for their creation: max_unknown_objects";
    if (held == 0) parked_bytes_.erase(src);
    throw BadCallError(none + " (and " + why + ")");
  }
  held += bytes;
  return bytes;
}

void ObjectTable::unpark(int src, std::size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = parked_bytes_.find(src);
  if (it == parked_bytes_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) parked_bytes_.erase(it);
}

std::shared_ptr<void> ObjectTable::local(std::uint64_t id, std::type_index type, std::chrono::milliseconds timeout) {
  std::shared_ptr<Object> obj = find(id);
  if (!obj) throw Error("RRef::local_value: no object " + std::to_string(id) + " on " + opts_.name);
  if (!obj->value.wait_for(timeout))
    throw TimeoutError("RRef::local_value: object " + std::to_string(id) + " not constructed within " +
                       std::to_string(timeout.count()) + " ms");
  auto value = obj->value.value();
  const std::type_index held = kind(*obj).first;
  if (held != type)
    throw Error("RRef::local_value: object " + std::to_string(id) + " holds " + demangle(held.name()) + ", not " +
                demangle(type.name()));
  return value;
}

void ObjectTable::expire(Clock::time_point now) {
  // Objects named by calls or notices whose creation never came (a forged or stale id, or an
  // object already released): their queued calls fail, their memory goes.
  if (now < next_sweep_) return;
  next_sweep_ = now + std::chrono::milliseconds(100);
  std::vector<std::pair<std::uint64_t, std::shared_ptr<Object>>> unknown;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!unknown_.empty() && unknown_.front().first + opts_.unknown_object_wait <= now) {
      const std::uint64_t id = unknown_.front().second;
      unknown_.pop_front();
      auto it = objects_.find(id);
      if (it == objects_.end() || it->second->constructed_seen) continue;
      unknown.emplace_back(id, std::move(it->second));
      objects_.erase(it);
    }
  }
  for (auto& [id, o] : unknown)  // callbacks answer the queued calls: outside the lock
    o->promise.set_error(std::make_exception_ptr(
        BadCallError("no object " + std::to_string(id) + " on " + opts_.name + ": nothing created it within " +
                     std::to_string(opts_.unknown_object_wait.count()) + " ms (never created, or already released)")));
}

void ObjectTable::clear() {
  decltype(objects_) dying;  // destroyed after the unlock: objects may hold RRefs
  std::lock_guard<std::mutex> lock(mu_);
  dying.swap(objects_);
}

std::size_t ObjectTable::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return objects_.size();
}

std::uint64_t ObjectTable::releases_refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return releases_refused_;
}

}  // namespace distrl::transport::detail
