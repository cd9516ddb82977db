// The sockets of the ZeroMQ process group: one ROUTER per process receives from every peer,
// one DEALER per peer sends (and watches the connection). Received messages are sorted into
// mailboxes by (group, source rank, tag); a thread that waits for a message and finds its
// mailbox empty reads the socket itself when no other thread is reading (leader/follower), so
// the common case costs no extra thread wake-up. Private to transport/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <zmq.hpp>

#include "transport/collectives/process_group.h"

namespace distrl::transport::detail {

using Clock = std::chrono::steady_clock;

// Fixed little-endian-host layout, checked by magic and size on receipt.
struct PgHeader {
  std::uint32_t magic = 0;
  std::uint8_t kind = 0;   // PgKind
  std::uint8_t coll = 0;   // ProcessGroup::Kind, or kP2P
  std::uint8_t dtype = 0;  // wire dtype code
  std::uint8_t op = 0;     // ReduceOp
  std::int32_t src = -1;   // sender's global rank
  std::uint32_t group = 0;
  std::int32_t tag = -1;  // -1: collective; >= 0: point-to-point tag
  std::int32_t root = 0;
  std::uint64_t seq = 0;   // collective number in the group
  std::int64_t numel = 0;  // elements of the call (per rank)
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
};
static_assert(sizeof(PgHeader) == 48, "PgHeader layout");
constexpr std::uint32_t kPgMagic = 0x31475044;  // "DPG1"
enum class PgKind : std::uint8_t { Data = 0, Abort = 1 };
constexpr std::uint8_t kP2P = 255;

struct PgMessage {
  PgHeader h;
  zmq::message_t payload;
};

// Checks one received [routing id, header, payload] (whole: it had no frames past those read)
// for a process of `rank` in a world of `world`: framing, magic, kind, a source rank in the
// world that is not ours and matches the connection's routing id (ids[src]: that rank's
// pg_identity under the group's member key). Returns the message (its payload moved out of
// frames) or nullopt with *why saying what was wrong. Payload sizes are checked by the
// collective that takes the message (Exec::recv).
std::optional<PgMessage> admit_pg_message(std::vector<zmq::message_t>& frames, bool whole, int rank,
                                          const std::vector<std::string>& ids, std::string* why);
// The routing id a member's DEALER connects under: "pg-r<rank>-<tag>", the tag being the rank's
// under the group's member key (link/endpoints.h: member_tag), so that no stranger can take it.
std::string pg_identity(int rank, const std::string& key);

// Counts zero-copy sends still held by ZeroMQ; shared with the free callbacks.
class SendTracker {
 public:
  void add();
  void release();
  bool idle();
  // False at the deadline.
  bool wait_idle(Clock::time_point deadline);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
};

class Mesh {
 public:
  // Binds, publishes its address under prefix, connects to every peer. shm_offer goes into the
  // address record's shm field: rank 0's shared-memory collectives address, "shm" on a rank
  // that would use rank 0's, empty on one that will not (transport zmq, tcp or ipc).
  Mesh(Store& store, const std::string& prefix, int rank, int world, const ProcessGroupOptions& options,
       const std::string& shm_offer = {});
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  // Whether collectives run in shared memory: every rank is on this host and offered it (the
  // same answer on every rank), and rank 0's address to fetch it from.
  bool shm_world() const { return shm_world_; }
  const std::string& shm_address() const { return shm_address_; }
  // Each rank's host (link/endpoints.h's host_id, from its address record): equal on ranks
  // that share a host.
  const std::vector<std::string>& host_ids() const { return host_ids_; }
  // Whether each rank offered shared memory in its address record (a non-empty shm field: it
  // runs transport auto or shm, and rank 0's segment, if it is rank 0, was made).
  const std::vector<bool>& shm_offered() const { return shm_offered_; }
  const ProcessGroupOptions& options() const { return options_; }

  // Sends header + bytes to global rank dst. Below kCopyBelow bytes, or without a tracker,
  // the data is copied; otherwise ZeroMQ reads it in place, holding `keep` (the owner of the
  // memory) alive and the tracker busy until it is done.
  void send(int dst, const PgHeader& h, const void* data, std::size_t bytes, const std::shared_ptr<const void>& keep,
            const std::shared_ptr<SendTracker>& tracker);
  // The next message of (group, src, tag). Throws TimeoutError at the deadline, TransportError
  // when src is gone, MismatchError/TransportError when a member aborted the group. `what`
  // names the waiting operation in errors. `seq`: the waiting collective's number; an abort
  // raised in collective S fails only collectives numbered S or later (every rank then fails
  // at the same one: the earlier ones' messages were all sent, as the aborting rank finished
  // them), and point-to-point receives (seq 0) at once.
  PgMessage recv(std::uint32_t group, int src, std::int32_t tag, Clock::time_point deadline, const std::string& what,
                 std::uint64_t seq = 0);
  // Non-blocking: a queued message, reading the socket once if no one else is.
  std::optional<PgMessage> try_recv(std::uint32_t group, int src, std::int32_t tag);
  // Tells the other members that this group failed in collective `seq` (0: whatever is
  // waiting, as abort() says; best effort, never blocks).
  void send_abort(std::uint32_t group, const std::vector<int>& members, const std::string& type,
                  const std::string& reason, std::uint64_t seq = 0);

  // Messages dropped since start: malformed (bad framing, magic, source rank or kind), a
  // source rank that is not the sending connection's (each member's DEALER connects under the
  // routing id "pg-r<rank>", which the ROUTER will not give to a second connection), or over
  // max_queued_bytes waiting in mailboxes.
  std::uint64_t bad_messages() const { return bad_messages_.load(); }

  static constexpr std::size_t kCopyBelow = 64 << 10;

 private:
  using Key = std::tuple<std::uint32_t, int, std::int32_t>;
  struct Peer;
  struct Abort {
    int from;
    std::string type, reason;
    std::uint64_t seq = 0;  // the collective it was raised in; 0: any
  };
  // Polls the sockets until something arrives or `until`; mu_ not held, reading_ owned.
  void read_sockets(Clock::time_point until);
  // With mu_ held: becomes the reader unless another thread is (then returns false at once),
  // reads the sockets with mu_ released, and hands the role back even when reading throws.
  bool lead_read(std::unique_lock<std::mutex>& lock, Clock::time_point until);
  std::optional<PgMessage> take(const Key& k);                                  // mu_ held
  [[noreturn]] void throw_abort(std::uint32_t group, const std::string& what);  // mu_ held

  int rank_, world_;
  ProcessGroupOptions options_;
  std::shared_ptr<zmq::context_t> ctx_;
  zmq::socket_t router_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<zmq::pollitem_t> items_;
  std::string ipc_path_;
  // Each rank's routing id (pg_identity) under the group's member key (<prefix>/member_key in the
  // store, made by rank 0).
  std::vector<std::string> ids_;
  bool shm_world_ = false;
  std::string shm_address_;
  std::vector<std::string> host_ids_;
  std::vector<bool> shm_offered_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool reading_ = false;
  std::map<Key, std::deque<PgMessage>> mailboxes_;
  std::size_t queued_bytes_ = 0;  // payload bytes in mailboxes_ (mu_)
  std::map<std::uint32_t, Abort> aborts_;
  std::vector<std::optional<Clock::time_point>> gone_since_;
  std::vector<std::string> endpoints_;
  std::atomic<std::uint64_t> bad_messages_{0};
};

}  // namespace distrl::transport::detail
