// One shard of the parameter server: named tensors (dense keys and row-split tables), a
// server-side optimizer, and the consistency rule that decides when pushed gradients are
// applied and when a push is answered.
//
//   sync   a round closes when `quorum` distinct trainers have pushed (0: every trainer still
//          present) or `max_wait` after the round's first push, whichever comes first; the
//          round's gradients are averaged per key (per row for tables), applied once, and
//          every push of the round is answered with the new values (the tutorial's
//          BatchUpdateParameterServer, through async execution). A push for a round that
//          closed without it is late: dropped (answered at once, `dropped`) or, with
//          `fold_late`, added to the open round. A trainer that leaves (its connection is
//          lost, or it said goodbye) leaves the quorum at once and is named in the log.
//   async  every push is applied on arrival and answered at once (Hogwild-style).
//   ssp    as async, but the answer to a push is held while its trainer is more than
//          `staleness` pushes ahead of the slowest trainer still present (bounded staleness).
//
// Thread-safety: every method may be called from any thread (the RPC handler pool); one lock
// guards the shard. A timer thread (`ps-timer`, from construction to stop()) closes sync rounds
// at max_wait and notices departed trainers every 100 ms. Answers complete on the thread that
// closed the round (a handler thread or the timer). Lifetime: create in the RpcAgent's setup
// callback (register_on), watch_trainers() once the agent runs, stop() before the agent shuts
// down.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "autograd/optimizer.h"
#include "training/ps/protocol.h"
#include "transport/future.h"
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
  // Snapshots (off when snapshot_path is empty): the shard's keys with their optimizer state,
  // its round and its trainers' clocks, written atomically (a temporary file renamed over the
  // last snapshot) by the timer thread every snapshot_rounds rounds (sync; pushes for async
  // and ssp) and/or every snapshot_every, whichever comes first, and once more at stop().
  std::string snapshot_path;
  int snapshot_rounds = 0;                        // 0: not by rounds
  std::chrono::milliseconds snapshot_every{0};    // 0: not by time
};

// "sync" | "async" | "ssp"; ConfigError otherwise.
ServerOptions::Mode parse_mode(const std::string& mode);

class ShardServer {
 public:
  // Trainers are ids 0..num_trainers-1 on ranks first_trainer_rank + id.
  ShardServer(int shard, int num_shards, int num_trainers, int first_trainer_rank, ServerOptions options);
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // Registers the ps.* functions on agent (in its setup callback).
  static void register_on(transport::RpcAgent& agent, const std::shared_ptr<ShardServer>& server);
  // Once agent runs: a trainer whose connection drops leaves the quorum (checked every 100 ms).
  void watch_trainers(transport::RpcAgent& agent);
  // Blocks until every trainer has said goodbye or is gone (no bound: trainers are watched).
  void wait_for_trainers();
  // Fails held answers, stops the timer and writes a last snapshot (when snapshots are on).
  // Idempotent.
  void stop();

  // Writes a snapshot to options.snapshot_path now (Error naming the file when it cannot).
  void snapshot();
  // Before any trainer can reach the shard (the agent's setup callback of a restarted server):
  // loads the snapshot at path — keys, optimizer state, round, clocks — and returns its round.
  // Throws Error naming the file when it is missing or unreadable.
  std::int64_t restore(const std::string& path);

  std::int64_t declare(DeclareRequest req);
  PullReply pull(const PullRequest& req);
  transport::Future<PushReply> push(PushRequest req);
  at::Tensor pull_rows(const RowsRequest& req);
  transport::Future<PushReply> push_rows(RowsPush req);
  ShardStats stats() const;
  void bye(int trainer);

 private:
  struct Entry;
  struct Update {
    Entry* entry;
    at::Tensor rows;  // table: local rows; undefined for a dense key
    at::Tensor grad;
  };
  struct Held {  // a push waiting for its round to close (sync) or for the slowest (ssp)
    int trainer;
    std::vector<Entry*> fetch;
    transport::Promise<PushReply> promise;
    PushReply reply;  // ssp: filled when applied
  };
  enum class Close { Quorum, Timeout, Departure };

  Entry& entry_locked(const std::string& name, const char* what);
  void check_trainer(int trainer) const;
  at::Tensor check_rows(const Entry& e, const at::Tensor& rows) const;
  transport::Future<PushReply> submit(int trainer, std::int64_t round, std::vector<Update> ups,
                                      std::vector<Entry*> fetch);
  void apply_locked(Entry& e, const at::Tensor& rows, at::Tensor grad);
  std::vector<at::Tensor> values_locked(const std::vector<Entry*>& fetch);
  int present_locked() const;
  bool quorum_reached_locked() const;
  std::vector<Held> close_round_locked(Close why);
  std::int64_t min_clock_locked() const;
  std::vector<Held> release_ssp_locked();
  void leave_locked(int trainer, const std::string& why, std::vector<Held>* done);
  static void answer(std::vector<Held>& done);
  void timer_loop();
  bool snapshot_due_locked() const;
  // The state a snapshot holds, copied under the lock (written to disk outside it).
  struct Saved;
  Saved save_locked() const;
  void write_snapshot(const Saved& saved);

  const int shard_, num_shards_, num_trainers_, first_trainer_rank_;
  const ServerOptions opt_;
  transport::RpcAgent* agent_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  // sync round
  std::int64_t round_ = 0;  // rounds closed
  std::vector<std::uint8_t> pushed_;  // trainer pushed in the open round
  int pushers_ = 0;
  std::chrono::steady_clock::time_point first_push_;
  std::vector<Held> held_;
  // trainers
  std::vector<TrainerStats> trainers_;
  ShardStats counters_;
  bool stopped_ = false;
  // snapshots
  std::int64_t progress_ = 0;  // rounds (sync) or pushes (async, ssp) so far
  std::int64_t snapshot_progress_ = 0;  // progress_ at the last snapshot
  std::chrono::steady_clock::time_point snapshot_time_;
  std::mutex snapshot_mu_;  // one writer at a time (the timer, stop(), snapshot())
  bool first_push_reported_ = true;  // restore() clears it: the first push after it is logged
  std::thread timer_;
};

}  // namespace distrl::training::ps
