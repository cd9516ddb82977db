// Collectives over shared memory, for a group whose ranks all run on this host: every rank
// copies its data into its own slot of one shared segment, the ranks meet at a barrier, and each
// reads (and reduces) the others' slots directly -- no socket, no message, one copy in and one
// copy out. Used by the ZeroMQ process group in place of its socket algorithms when the world is
// on one host (transport auto or shm); point-to-point calls stay on its sockets.
//
// The segment (a sealed memfd, made by rank 0 and passed to the others over a 0600 Unix socket,
// as the shared-memory RPC link does) holds a control block, one block per rank (its barrier
// counter and the description of the collective it runs) and two slots of chunk_bytes per rank
// (double-buffered: a rank fills one while slower ranks still read the other).
//
// Algorithms (n ranks, r this rank, one chunk of at most chunk_bytes per rank at a time):
// - all_reduce, small (<= small_bytes and one chunk): each rank fills its slot, one barrier,
//   each reduces all slots in rank order (the same bits everywhere) -- one barrier per call.
// - all_reduce, large: per chunk, fill; barrier; rank r reduces part r of the chunk over all
//   slots (computed once, so every rank gets the same bits) and publishes it; barrier; each
//   copies the other parts out -- two barriers per chunk.
// - broadcast / all_gather / gather: fill (root or everyone); barrier; read. reduce: fill;
//   barrier; the root reduces. reduce_scatter / scatter: each rank's slot holds n pieces;
//   barrier; rank r reads piece r. barrier: a barrier. One barrier per chunk.
// The first barrier of every collective also carries each rank's description of it (kind,
// number, dtype, element count, root, op): ranks that called different collectives all raise
// MismatchError naming the first difference.
//
// Failure: a rank that fails (timeout, mismatch, abort()) marks the segment aborted with its
// reason and wakes everyone; the others raise the error naming it. A rank's death is seen on
// the Unix sockets (rank 0 holds one to each member, each member one to rank 0): the kernel
// closes a dead process's end. Rank 0 watches its members' sockets from a thread of its own
// ("distrl-pg-watch", from admit_members to destruction), which marks the group aborted naming
// a member as soon as it dies, whether or not rank 0 is in a collective; a member waiting for
// rank 0 that finds rank 0's socket closed marks it so itself. The segment is untrusted input like a socket: sizes and offsets
// come from this process's own options, never from the shared words; what a peer writes there
// can only make a collective compute garbage or fail, never make this process crash or hang
// past its deadline.
//
// Not thread-safe: the owning group runs one collective at a time. Private to
// transport/collectives/.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transport/collectives/process_group.h"

namespace distrl::transport::detail {

class ShmCollectives {
 public:
  using Clock = std::chrono::steady_clock;
  ~ShmCollectives();
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  // Rank 0, before the address exchange: makes the segment for `world` ranks and listens for
  // them. Returns nullptr with *why when it cannot (no memfd, RLIMIT_FSIZE, no /tmp).
  static std::unique_ptr<ShmCollectives> host(int world, const ProcessGroupOptions& options, std::string* why);
  // What rank 0 publishes for the others ("shm:///tmp/distrl-...ipc").
  std::string address() const;
  // Rank 0, after the exchange: hands the segment to every other rank (each says its rank in a
  // hello; anything else is closed). TimeoutError at the deadline.
  void admit_members(Clock::time_point deadline);
  // Ranks other than 0: connects to rank 0's address, receives and maps the segment (refused
  // unless its size matches this rank's own world and chunk_bytes).
  static std::unique_ptr<ShmCollectives> join(const std::string& address, int rank, int world,
                                              const ProcessGroupOptions& options, Clock::time_point deadline);

  // Runs one checked collective (ProcessGroup::check_call passed; CPU tensors). `seq` is its
  // number in the group, the same on every rank; `what` names it in errors. Throws
  // MismatchError, TimeoutError or TransportError; after any failure the group is aborted.
  void run(ProcessGroup::Call& call, std::uint64_t seq, Clock::time_point deadline, const std::string& what);
  // Marks the group aborted (first reason wins) and wakes every waiter: their collectives raise
  // `type` ("MismatchError", "TimeoutError", else TransportError) naming this rank and reason.
  void abort(const std::string& type, const std::string& reason);

 private:
  struct Impl;
  explicit ShmCollectives(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace distrl::transport::detail
