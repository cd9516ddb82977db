// One shard of the parameter server: named tensors (dense keys and row-split tables), a
// server-side optimizer, and the consistency rule that decides when pushed gradients are
// applied and when a push is answered.
//
//   sync   a round closes when `quorum` distinct trainers have pushed (0: every trainer still
//          present) or `max_wait` after the round's first push, whichever comes first; the
//          round's gradient is the mean over the round's pushes -- for every dense key and
//          every table row, the sum of what the round's pushes carried divided by how many
//          pushes the round holds (a push that carried nothing for a key or row counts as a
//          zero gradient) -- applied once, and every push of the round is answered with the
//          new values (the tutorial's BatchUpdateParameterServer, through async execution).
//          A push for a round that closed without it is late: dropped (answered at once,
//          `dropped`) or, with `fold_late`, added to the open round. A trainer that leaves (its
//          connection is lost, or it said goodbye) leaves the quorum at once and is logged.
//   async  every push is applied on arrival and answered at once (Hogwild-style).
//   ssp    as async, but a push's answer is held while its trainer is more than `staleness`
//          pushes ahead of the slowest trainer still present, and its values are read when it
//          is released: a trainer at clock c (c pushes made) reads values holding every
//          present trainer's first c - staleness pushes (staleness 0 reads like BSP).
// Exactly once (protocol.h, PushId): a push that reaches the shard again -- a retry after a
// lost connection, or after this shard restarted from a snapshot -- is answered with its first
// outcome (applied or dropped) and the current values, and not applied again.
//
// Sync over several shards (protocol.h, Decision): shard 0 decides every round -- which pushes
// make it, which are dropped as late -- and tells the other shards before it answers its own
// pushes; they never close a round themselves but apply exactly the pushes each decision names
// (waiting for those still on their way; a push that cannot come -- its trainer is gone, or a
// later push of it is here -- counts as zero), in the leader's order. So quorum, max_wait,
// departures and late pushes give every shard the same trainers in round k. A restarted
// follower (or one stalled 2 s, whose decisions may have been lost while it was unreachable)
// asks the leader for the rounds after the last it applied (ps.follow) and replays them with
// the pushes that reach it again; a push decided in a round the leader no longer keeps (1024)
// is answered as dropped there. Across a restart of the leader the rounds are its
// restored process's: one that mixes the retries of trainers it had not answered before it
// died with the others' next pushes is applied by the followers as decided (the rollback's
// loss of exactness; a follower then counts one round more than the trainers made). Such a
// round's mean is over all the pushes the decision names, also on a follower that applied some
// of them already (before the leader's restart; they count as zero there, not twice): each new
// push then has the weight the leader gave it on every shard (1/pushes), so one trainer's
// gradient moves all its parameters alike. Dividing by only the pushes applied would give a
// new push a larger step on that follower's parameters than on the leader's.
//
// Thread-safety: every method may be called from any thread (the RPC handler pool); one lock
// guards the shard. A timer thread (`ps-timer`, from construction to stop()) closes sync rounds
// at max_wait, notices departed trainers every 100 ms, asks a stalled follower's leader again
// and writes snapshots. Answers complete on
// the thread that closed the round (a handler thread or the timer) or, on the leader of several
// shards, on the RPC pool once every follower has the decision. Lifetime: create in the
// RpcAgent's setup callback (register_on), watch_trainers() once the agent runs, stop() before
// the agent shuts down.
#pragma once

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
#include <thread>
#include <vector>

#include "autograd/optimizer.h"
#include "training/ps/protocol.h"
#include "transport/runtime/future.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {

struct ServerOptions {
  enum class Mode { Sync, Async, Ssp };
  Mode mode = Mode::Sync;
  int quorum = 0;                         // sync: trainers that close a round; 0 = all present
  std::chrono::milliseconds max_wait{0};  // sync: round deadline after its first push; 0 = none
  bool fold_late = false;                 // sync: late pushes join the open round (else dropped)
  int staleness = 0;                      // ssp: pushes a trainer may run ahead of the slowest
  autograd::OptimizerSpec optimizer;      // sgd (momentum, nesterov), adagrad, adam
  int hot_rows = 5;                       // stats: rows listed per table
  // sync, several shards: how long a follower waits for a push its leader put in a round while
  // the trainer is still present (a gone trainer's push counts as zero at once); then the round
  // is applied without it, with an error in the log.
  std::chrono::milliseconds decision_wait{60000};
  // Snapshots (off when snapshot_path is empty): the shard's keys with their optimizer state,
  // its round, its trainers' clocks and last pushes, written atomically (a temporary file
  // renamed over the last snapshot) by the timer thread every snapshot_rounds rounds (sync;
  // pushes for async and ssp) and/or every snapshot_every, whichever comes first, and once
  // more at stop().
  std::string snapshot_path;
  int snapshot_rounds = 0;                      // 0: not by rounds
  std::chrono::milliseconds snapshot_every{0};  // 0: not by time
};

// "sync" | "async" | "ssp"; ConfigError otherwise.
ServerOptions::Mode parse_mode(const std::string& mode);
// What a shard serving num_trainers refuses in its options (ConfigError naming the key): its
// constructor checks them, and so does --check-config.
void check_options(const ServerOptions& o, int num_trainers);

class ShardServer {
 public:
  // Shard k is rank k; trainers are ids 0..num_trainers-1 on ranks first_trainer_rank + id.
  ShardServer(int shard, int num_shards, int num_trainers, int first_trainer_rank, ServerOptions options);
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // Registers the ps.* functions on agent (in its setup callback); the leader of several sync
  // shards sends its decisions through agent from then on.
  static void register_on(transport::RpcAgent& agent, const std::shared_ptr<ShardServer>& server);
  // Once agent runs: a trainer whose connection drops leaves the quorum (checked every 100 ms);
  // a restarted follower asks the leader where it stands (TransportError naming the leader when
  // it does not answer within decision_wait).
  void watch_trainers(transport::RpcAgent& agent);
  // Blocks until every trainer has said goodbye or is gone (no bound: trainers are watched).
  void wait_for_trainers();
  // Fails held answers, stops the timer and writes a last snapshot (when snapshots are on).
  // Idempotent.
  void stop();

  // Writes a snapshot to options.snapshot_path now (Error naming the file when it cannot).
  void snapshot();
  // Before any trainer can reach the shard (the agent's setup callback of a restarted server):
  // loads the snapshot at path -- keys, optimizer state, round, clocks, last pushes -- and
  // returns its round. Throws Error naming the file when it is missing or unreadable.
  std::int64_t restore(const std::string& path);

  std::int64_t declare(DeclareRequest req);
  PullReply pull(const PullRequest& req);
  transport::Future<PushReply> push(PushRequest req);
  at::Tensor pull_rows(const RowsRequest& req);
  transport::Future<PushReply> push_rows(RowsPush req);
  ShardStats stats() const;
  void bye(int trainer);

  // Sync over several shards. The leader hands each decision to send(follower shard, d) and
  // answers the pushes it decided once every returned future has completed (register_on sends
  // ps.decide; a test may connect two shards directly). A follower takes decisions through
  // decide() (ps.decide) and answers leader questions with follow() (ps.follow).
  using DecisionSink = std::function<transport::Future<bool>(int shard, const Decision& d)>;
  void set_decision_sink(DecisionSink send);
  bool decide(Decision d);
  FollowReply follow(std::int64_t leader, std::int64_t round) const;
  // A follower that restarted: apply decisions only after take_follow(leader's follow()).
  void await_leader();
  void take_follow(const FollowReply& r);

 private:
  struct Entry;
  struct Update {
    Entry* entry;
    at::Tensor rows;  // table: local rows; undefined for a dense key
    at::Tensor grad;
  };
  // A push on its way to an answer: held for its round to close (sync) or for the slowest
  // trainer (ssp), or answered as soon as the lock is released.
  struct Held {
    PushId id;
    std::vector<Entry*> fetch;
    transport::Promise<PushReply> promise;
    std::vector<transport::Promise<PushReply>> resent;  // the same push arrived again meanwhile
    PushReply reply;
    std::vector<Update> ups;  // a follower's push: kept until its leader decides
  };
  // Per trainer: its process's incarnation and the last push whose outcome is final here.
  struct LastPush {
    std::int64_t incarnation = 0, seq = 0;
    bool dropped = false;
  };
  // What a critical section decided: answers, and (leader) the decisions followers need first.
  struct Outcome {
    std::vector<Held> done;
    std::vector<Decision> decisions;
  };
  // Stale: a copy of a push older than the trainer's last one here (delayed past its successor):
  // counted as a duplicate, then refused.
  enum class Seen { New, Held, Decided, Stale };
  using Close = Decision::Kind;

  Entry& entry_locked(const std::string& name, const char* what);
  void check_trainer(int trainer) const;
  void check_push(const PushId& id) const;
  at::Tensor check_rows(const Entry& e, const at::Tensor& rows) const;
  // A table of global_rows keeps its rows shard, shard + num_shards, ... here: how many.
  std::int64_t rows_here(std::int64_t global_rows) const;
  transport::Future<PushReply> submit(const PushId& id, std::int64_t round, std::vector<Update> ups,
                                      std::vector<Entry*> fetch);
  Seen seen_locked(const PushId& id, Held** held);
  void accept_locked(Held h, std::int64_t round, Outcome& out);
  void repeat_locked(Held h, Outcome& out);
  void remember_locked(const PushId& id, bool dropped);
  void note_pushed_locked(const std::vector<Update>& ups);
  void apply_locked(Entry& e, const at::Tensor& rows, at::Tensor grad);
  std::vector<at::Tensor> values_locked(const std::vector<Entry*>& fetch);
  // sync rounds (server_rounds.cpp)
  void accept_sync_locked(Held h, std::int64_t round, Outcome& out);
  void accumulate_locked(const std::vector<Update>& ups);
  void drop_locked(Held h, Outcome& out);
  int present_locked() const;
  bool quorum_reached_locked() const;
  // sync, not a follower: when the open round closes at the latest (max_wait), if it does.
  std::optional<std::chrono::steady_clock::time_point> round_deadline_locked() const;
  void close_round_locked(Close why, Outcome& out);
  void apply_round_locked(std::size_t pushes, Close why);
  void answer_round_locked(std::vector<Held>& pushes, Outcome& out);
  bool leads() const { return sync_shards_ && shard_ == 0; }
  bool follows() const { return sync_shards_ && shard_ != 0; }
  void decision_again_locked(const PushId& id, Outcome& out);
  bool final_here_locked(const PushId& id) const;  // applied or dropped here already
  void drop_decided_locked(const std::vector<PushId>& ids, Outcome& out);
  void follow_locked(Outcome& out);
  void check_decision(const Decision& d) const;
  void refollow();
  bool lost_locked(const PushId& id) const;
  bool will_not_come_locked(const PushId& id) const;
  bool follow_one_locked(const Decision& d, bool overdue, Outcome& out);
  [[noreturn]] void crash_after_snapshot_locked();
  std::int64_t min_clock_locked() const;
  void release_ssp_locked(Outcome& out);
  void leave_locked(int trainer, const std::string& why, Outcome& out);
  void finish(Outcome out);
  static void answer(std::vector<Held>& done);
  void timer_loop();
  bool timer_tick_locked(Outcome& out);
  bool snapshot_due_locked() const;
  // The state a snapshot holds, copied under the lock (written to disk outside it).
  struct Saved;
  Saved save_locked() const;
  void write_snapshot(const Saved& saved, const std::string& path);
  std::deque<Decision> decisions_from(const at::Tensor& rows, const std::string& where) const;

  const int shard_, num_shards_, num_trainers_, first_trainer_rank_;
  const ServerOptions opt_;
  const bool sync_shards_;  // sync rounds over several shards: the leader decides
  transport::RpcAgent* agent_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  // sync round
  std::int64_t round_ = 0;            // rounds closed
  std::vector<std::uint8_t> pushed_;  // trainer pushed in the open round
  int pushers_ = 0;
  std::chrono::steady_clock::time_point first_push_;
  std::vector<Held> held_;
  // sync over several shards
  DecisionSink send_decision_;
  std::int64_t incarnation_ = 1;  // this process's (the leader's decisions carry it)
  std::int64_t first_round_ = 1;  // leader: the first round this process decides (or sends again)
  std::deque<Decision> recent_;   // leader: its last rounds' (the last in snapshots: sent again)
  std::int64_t leader_ = 1;       // follower: the leader process whose decisions apply
  std::int64_t next_round_ = 1;   // follower: the leader's round applied next (in snapshots)
  bool following_ = true;         // follower: false until a restarted one heard ps.follow
  bool refollowing_ = false;      // follower: a ps.follow is on its way
  std::chrono::steady_clock::time_point last_progress_;  // follower: a round applied, or asked
  static constexpr std::chrono::seconds kRefollowAfter{2};
  static constexpr int kMaxHeldPerTrainer = 3;
  static constexpr std::size_t kMaxResent = 8;  // copies of one held push that wait with it
  std::weak_ptr<ShardServer> self_;             // set by register_on: callbacks that may outlive a call
  struct Waiting {
    Decision d;
    std::chrono::steady_clock::time_point since;  // arrival
  };
  std::map<std::pair<std::int64_t, std::int64_t>, Waiting> decisions_;  // by (leader, round)
  std::vector<PushId> decided_before_;  // follower: per trainer, the leader's last decided when it followed
  std::vector<PushId> dropped_ahead_;   // follower: per trainer, a drop decided before it arrived
  // trainers
  std::vector<TrainerStats> trainers_;
  std::vector<LastPush> last_;  // exactly once
  ShardStats counters_;
  bool stopped_ = false;
  // snapshots
  std::int64_t progress_ = 0;           // rounds (sync) or pushes (async, ssp) so far
  std::int64_t snapshot_progress_ = 0;  // progress_ at the last snapshot
  std::chrono::steady_clock::time_point snapshot_time_;
  std::mutex snapshot_mu_;           // one writer at a time (the timer, stop(), snapshot())
  bool first_push_reported_ = true;  // restore() clears it: the first push after it is logged
  std::thread timer_;
};

}  // namespace distrl::training::ps
