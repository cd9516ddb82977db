// The process group's messages over the world's links (link/world_links.h: ZeroMQ, shared
// memory, or both chosen per pair of peers, as RPC's): each process sends through a channel of
// its own per peer (one sending thread at a time per peer) and the link's I/O thread sorts what
// arrives into mailboxes by (group, source rank, tag), where waiting threads take it. The links
// bring death detection (a connection's close, the heartbeat), frame and size limits and member
// identity (a message's source rank must be its connection's member rank) once, for RPC and
// collectives alike. Private to transport/.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "transport/collectives/process_group.h"
#include "transport/link/link.h"

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
  Frame payload;
};

// Checks one received [header, payload] from the connection of member `from` (-1: no member's;
// the link says whose) for a process of `rank` in a world of `world`: framing, magic, kind, a
// source rank in the world that is not ours and is the connection's. Returns the message (its
// payload moved out of frames) or nullopt with *why saying what was wrong. Payload sizes are
// checked by the collective that takes the message (Exec::recv).
std::optional<PgMessage> admit_pg_message(Frames& frames, int from, int rank, int world, std::string* why);

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
  // Makes and binds the links, publishes its address under prefix, learns every peer's and
  // starts the link. collectives_offer goes into the address record's `collectives` field: rank
  // 0's shared-memory collectives address, "shm" on a rank that would use rank 0's, empty on one
  // that will not (transport zmq, tcp or ipc).
  Mesh(Store& store, const std::string& prefix, int rank, int world, const ProcessGroupOptions& options,
       const std::string& collectives_offer = {});
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
  // Whether each rank offered shared-memory collectives in its address record (it runs
  // transport auto or shm, and rank 0's segment, if it is rank 0, was made).
  const std::vector<bool>& shm_offered() const { return shm_offered_; }
  const ProcessGroupOptions& options() const { return options_; }
  // The endpoint this process reaches each rank at (shm://... over shared memory, tcp:// or
  // ipc:// over ZeroMQ; its own entry as chosen for itself): the link chosen per pair.
  const std::vector<std::string>& endpoints() const { return endpoints_; }

  // Sends header + bytes to global rank dst. Below kCopyBelow bytes, or without a tracker,
  // the data is copied; otherwise the link reads it in place (ZeroMQ after this returns, shared
  // memory before), holding `keep` (the owner of the memory) alive and the tracker busy until it
  // is done. Throws TransportError when it cannot be sent (the peer gone, a full queue; over
  // shared memory a ring that stays full for the group's timeout: the peer stopped reading).
  // best_effort: fails when another thread's send to dst goes on for 100 ms (abort notices).
  void send(int dst, const PgHeader& h, const void* data, std::size_t bytes, const std::shared_ptr<const void>& keep,
            const std::shared_ptr<SendTracker>& tracker, bool best_effort = false);
  // The next message of (group, src, tag). Throws TimeoutError at the deadline, TransportError
  // when src is gone, MismatchError/TransportError when a member aborted the group. `what`
  // names the waiting operation in errors. `seq`: the waiting collective's number; an abort
  // raised in collective S fails only collectives numbered S or later (every rank then fails
  // at the same one: the earlier ones' messages were all sent, as the aborting rank finished
  // them), and point-to-point receives (seq 0) at once.
  PgMessage recv(std::uint32_t group, int src, std::int32_t tag, Clock::time_point deadline, const std::string& what,
                 std::uint64_t seq = 0);
  // Non-blocking: a queued message.
  std::optional<PgMessage> try_recv(std::uint32_t group, int src, std::int32_t tag);
  // Tells the other members that this group failed in collective `seq` (0: whatever is
  // waiting, as abort() says). Best effort: a member another thread has been sending to for
  // 100 ms is skipped; one whose shared-memory ring is full waits as send() says.
  void send_abort(std::uint32_t group, const std::vector<int>& members, const std::string& type,
                  const std::string& reason, std::uint64_t seq = 0);

  // While this rank runs collective `seq` of `group` through subgroups (the hierarchical
  // all_reduce): a collective message of `group` numbered `seq` means a member runs a flat
  // collective there instead, and calls on_mismatch with its header, once: on the link's I/O
  // thread, or here for one that came first. on_mismatch must neither block nor send
  // (fail_locally is what it is for). unwatch_collective waits for a call under way.
  void watch_collective(std::uint32_t group, std::uint64_t seq, std::function<void(const PgHeader&)> on_mismatch);
  void unwatch_collective();
  // Fails this process's waits in `group` (those of collectives numbered `seq` or later, every
  // one for 0) as an abort from a member would, with `type` (MismatchError, TimeoutError, else
  // TransportError) and `reason`; tells nobody.
  void fail_locally(std::uint32_t group, const std::string& type, const std::string& reason, std::uint64_t seq = 0);

  // Messages dropped since start: malformed (bad framing, magic, source rank or kind, too many
  // frames), a source rank that is not the sending connection's member rank (a stranger's, or
  // a member posing as another), or over max_queued_bytes waiting in mailboxes.
  std::uint64_t bad_messages() const { return bad_messages_.load(); }

  static constexpr std::size_t kCopyBelow = 64 << 10;

 private:
  using Key = std::tuple<std::uint32_t, int, std::int32_t>;
  struct Peer;
  struct Abort {
    int from;  // this rank's own: fail_locally
    std::string type, reason;
    std::uint64_t seq = 0;  // the collective it was raised in; 0: any
  };
  struct Watch {
    std::uint32_t group;
    std::uint64_t seq;
    std::function<void(const PgHeader&)> on_mismatch;
  };
  // The watch's callback if h is what it waits for (then it is spent); mu_ held.
  std::function<void(const PgHeader&)> watched(const PgHeader& h);
  void call_watch(const std::function<void(const PgHeader&)>& fn, const PgHeader& h);  // mu_ not held
  Link::Events events();
  // The link's I/O thread: a message from a peer's channel, a peer lost or back.
  void on_request(Caller&& from, Frames&& frames);
  void on_peer(int peer, bool down, const std::string& why);
  void count_bad(const std::string& what);
  bool gone(int peer, Clock::time_point now);                                   // mu_ held
  std::optional<PgMessage> take(const Key& k);                                  // mu_ held
  [[noreturn]] void throw_abort(std::uint32_t group, const std::string& what);  // mu_ held

  int rank_, world_;
  ProcessGroupOptions options_;
  std::unique_ptr<Link> link_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::vector<std::string> endpoints_;
  std::string ipc_path_;
  bool shm_world_ = false;
  std::string shm_address_;
  std::vector<std::string> host_ids_;
  std::vector<bool> shm_offered_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<PgMessage>> mailboxes_;
  std::size_t queued_bytes_ = 0;  // payload bytes in mailboxes_ (mu_)
  std::map<std::uint32_t, Abort> aborts_;
  std::optional<Watch> watch_;
  bool in_watch_call_ = false;  // a watch callback runs (mu_ released)
  std::vector<std::optional<Clock::time_point>> gone_since_;
  std::vector<std::string> gone_why_;
  std::atomic<std::uint64_t> bad_messages_{0};
};

}  // namespace distrl::transport::detail
