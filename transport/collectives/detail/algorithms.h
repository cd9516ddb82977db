// The ZeroMQ process group's algorithms, run by one thread per collective over a Mesh.
// Algorithms (n ranks, r this rank):
// - all_reduce, small (<= small_bytes, or fewer elements than ranks): recursive doubling; with
//   n not a power of two, the first 2*(n - p) ranks pair up first and the odd ones stand in.
// - all_reduce, large: ring reduce-scatter then all-gather over n segments, each cut into
//   chunks of chunk_bytes; a chunk is forwarded as soon as it is reduced, so receiving,
//   reducing and sending overlap. Step k sends segment r-k-1 and receives segment r-k-2.
// - reduce_scatter / all_gather: the first / second half of that ring.
// - broadcast: binomial tree (small) or a chunked chain (large); reduce: binomial tree;
//   gather / scatter: direct; barrier: recursive doubling on one byte. Rooted
//   collectives first pass each rank's root to the next rank (agree_on_root).
// Every rank computes each reduced value once (ring) or with commuting operands (recursive
// doubling), so all ranks end with the same bits.
// Private to transport/collectives/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/collectives/detail/pg_mesh.h"

namespace distrl::transport::detail {

inline int mod(int x, int n) { return ((x % n) + n) % n; }
inline char* data(const at::Tensor& t) { return static_cast<char*>(t.data_ptr()); }
// Collectives with a root: broadcast, reduce, gather, scatter.
inline bool is_rooted(ProcessGroup::Kind k) {
  using K = ProcessGroup::Kind;
  return k == K::Broadcast || k == K::Reduce || k == K::Gather || k == K::Scatter;
}
// "all_reduce #3 of float32[10] (sum)", for errors.
std::string describe(const PgHeader& h);

// Throws MismatchError when m (from world rank `from`, as errors name it) belongs to another
// collective than h describes (kind, number, dtype, size, root, op), ProtocolError when its
// step, chunk or payload size is not the expected one. A message that passes has exactly `bytes` of payload.
void check_collective_message(const PgHeader& h, const PgMessage& m, int from, std::uint32_t step, std::uint32_t chunk,
                              std::size_t bytes, const std::string& what);

// One collective as it runs: the expected header, the peers, the deadline.
struct Exec {
  Exec(Mesh& m, const std::vector<int>& group_members) : mesh(m), members(group_members) {}
  Mesh& mesh;
  const std::vector<int>& members;  // group rank -> global rank
  int me = 0, n = 1;
  PgHeader h;  // step/chunk filled per message
  c10::ScalarType type = c10::ScalarType::Byte;
  ReduceOp op = ReduceOp::Sum;
  std::size_t esize = 1;
  Clock::time_point deadline;
  std::shared_ptr<SendTracker> tracker = std::make_shared<SendTracker>();
  std::shared_ptr<const void> keep;  // the tensors zero-copy sends point into
  std::string what;

  void send(int to, std::uint32_t step, std::uint32_t chunk, const void* p, std::size_t bytes, bool zero_copy = true) {
    PgHeader m = h;
    m.step = step;
    m.chunk = chunk;
    mesh.send(members[to], m, p, bytes, keep, zero_copy ? tracker : nullptr);
  }

  // The next message from group rank `from`, checked against this collective (MismatchError
  // when the peer runs another one, ProtocolError for a wrong step or size).
  PgMessage recv(int from, std::uint32_t step, std::uint32_t chunk, std::size_t bytes);
  // Waits until ZeroMQ has sent every zero-copy buffer (TimeoutError at the deadline).
  void finish_sends();
};

// Rooted collectives begin here (n > 1): each rank sends the next one (r+1 mod n) a message
// without payload, step kRootCheckStep, whose header carries its root, and reads the previous
// rank's before anything else. Ranks that named different roots would otherwise each wait for
// data nobody sends them (reduce, gather: until the timeout) or only send and finish
// (broadcast, scatter: the error surfaced at the next collective); around the ring some rank
// reads a different root, raises MismatchError naming both calls, and aborts the group.
constexpr std::uint32_t kRootCheckStep = 0xfffe;
void agree_on_root(Exec& e);

// Recursive doubling on a whole buffer; sends copy (the buffer changes after each send).
void all_reduce_small(Exec& e, char* buf, std::int64_t numel);
// The ring over n segments, steps [k0, k1): steps 0..n-2 reduce-scatter (rank r ends with
// segment r reduced), steps n-1..2n-3 all-gather.
void ring(Exec& e, const std::vector<char*>& seg, const std::vector<std::int64_t>& len, int k0, int k1,
          std::size_t chunk_bytes);
// n near-equal segments of one buffer.
void split(char* base, std::int64_t numel, std::size_t esize, int n, std::vector<char*>* seg,
           std::vector<std::int64_t>* len);
// Binomial tree (small) or a chunked chain from root (large).
void run_broadcast(Exec& e, char* buf, std::int64_t numel, int root, std::size_t small_bytes, std::size_t chunk_bytes);
// Binomial tree towards root; work is reduced in place (root's holds the result).
void run_reduce(Exec& e, char* work, std::int64_t numel, int root);

}  // namespace distrl::transport::detail
