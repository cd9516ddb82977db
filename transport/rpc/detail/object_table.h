// The objects this worker owns for RRefs (transport/README.md, "RRef reference counting"): each
// object's value (a future until its creating request has run), its type and packer, its live
// forks and the rank holding each, and releases that overtook their fork notice. Calls naming
// an object whose creating request has not arrived wait on a placeholder, bounded by the
// owner's RpcOptions (unknown_object_wait, max_unknown_objects, max_parked_bytes per member).
// One lock; any thread. Nothing runs under it that could call back in: an object whose last
// reference goes is returned to the caller, which lets it go outside (its destructor may
// release RRefs and so come back here). Private to transport/rpc/.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <typeindex>
#include <unordered_map>

#include "transport/wire/detail/message.h"
#include "transport/runtime/future.h"
#include "transport/rpc/options.h"

namespace distrl::transport::detail {

class ObjectTable {
 public:
  using Clock = std::chrono::steady_clock;
  using PackFn = std::function<void(const void*, Packer&)>;
  struct Object {
    Promise<std::shared_ptr<void>> promise;
    Future<std::shared_ptr<void>> value = promise.get_future();
    std::type_index type = typeid(void);  // set with pack, under the table's lock
    PackFn pack;
    bool constructed_seen = false;  // the creating request has arrived
    // Live forks -> the rank holding each (only it may release it); releases that overtook
    // their fork notice -> the rank that sent them (at most kMaxEarlyReleases per object).
    std::map<std::uint64_t, int> forks, released_early;
  };
  static constexpr std::size_t kMaxEarlyReleases = 64;

  // options: the owner's (name and the bounds above), read as calls come; they outlive the table.
  explicit ObjectTable(const RpcOptions& options) : opts_(options) {}

  // An object of this worker's own (make_rref): constructed, held by `owner` under fork id `id`.
  void adopt(std::uint64_t id, std::shared_ptr<void> value, std::type_index type, PackFn pack, int owner);
  // The creating request of object id (remote()) arrived from `creator`, who holds the first
  // reference: calls can queue on the object from now on.
  void creating(std::uint64_t id, int creator);
  // Object id, or null when there is none (every holder let go already).
  std::shared_ptr<Object> find(std::uint64_t id) const;
  // The creating request's result: the object's type and how to pack it (to_here()). The
  // caller completes the object's promise.
  void set_kind(Object& o, std::type_index type, PackFn pack);
  // A new fork of object id, held by rank holder.
  void add_fork(std::uint64_t id, std::uint64_t fork, int holder);
  // Rank `from` lets go of a fork. Only the fork's holder can: a release from any other rank is
  // refused (counted) and frees nothing. Returns the object when this was its last reference.
  [[nodiscard]] std::shared_ptr<Object> release(std::uint64_t id, std::uint64_t fork, int from);

  // The object a method call names (`obj` of a call from `src`, of wire_bytes bytes). When its
  // creating request has not arrived (an RRef passed on by another member can overtake it), a
  // member's call waits for it on a placeholder and its bytes count against that member's
  // max_parked_bytes until unpark: the bytes to give back are returned. A call that may not wait
  // is refused: BadCallError naming the bound. world: members are ranks 0..world-1; src_name
  // names src in that error.
  std::size_t park(std::uint64_t obj, int src, std::size_t wire_bytes, int world, const std::string& src_name,
                   std::shared_ptr<Object>* out);
  void unpark(int src, std::size_t bytes);
  // The object's type and packer as set so far.
  std::pair<std::type_index, PackFn> kind(const Object& o) const;
  // RRef::local_value: the constructed object id, of type `type` (Error otherwise; TimeoutError
  // when it is not constructed within timeout).
  std::shared_ptr<void> local(std::uint64_t id, std::type_index type, std::chrono::milliseconds timeout);

  // I/O thread, each round (looks every 100 ms): objects named but not created within
  // unknown_object_wait go, and the calls queued on them fail.
  void expire(Clock::time_point now);
  // Shutdown: every object goes (destroyed outside the lock).
  void clear();

  std::size_t live() const;
  std::uint64_t releases_refused() const;

 private:
  // The object with this id; a new placeholder when there is none (null when max_unknown_objects
  // placeholders wait already). creating: for the creating request itself (never refused).
  std::shared_ptr<Object> object_locked(std::uint64_t id, bool creating = false);
  void add_fork_locked(std::uint64_t id, std::uint64_t fork, int holder);

  const RpcOptions& opts_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, std::shared_ptr<Object>> objects_;
  std::uint64_t releases_refused_ = 0;  // by a rank that does not hold the fork, or past the cap
  // Objects named before their creating request arrived, oldest first.
  std::deque<std::pair<Clock::time_point, std::uint64_t>> unknown_;
  std::uint64_t unknown_refused_ = 0;  // names refused because max_unknown_objects were waiting
  // Bytes of the calls waiting on objects not seen created, per member rank (max_parked_bytes);
  // a rank's entry goes when its last such call is answered.
  std::map<int, std::size_t> parked_bytes_;
  Clock::time_point next_sweep_{};  // expire() looks every 100 ms (I/O thread only)
};

}  // namespace distrl::transport::detail
