// The parameter server's wire: the functions every server process registers and the messages
// they take. Keys are named tensors: dense ones live whole on one shard (chosen by a hash of
// the name), tables ([rows, dim], embeddings) are split by row over all shards (row r on shard
// r % S, as its local row r / S). Only touched rows of a table travel (`pull_rows`,
// `push_rows`), as raw tensor frames.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <msgpack.hpp>

#include "transport/wire/tensor.h"

namespace distrl::training::ps {

inline constexpr const char* kDeclare = "ps.declare";
inline constexpr const char* kPull = "ps.pull";
inline constexpr const char* kPush = "ps.push";
inline constexpr const char* kPullRows = "ps.pull_rows";
inline constexpr const char* kPushRows = "ps.push_rows";
inline constexpr const char* kStats = "ps.stats";
inline constexpr const char* kBye = "ps.bye";
inline constexpr const char* kDecide = "ps.decide";
inline constexpr const char* kFollow = "ps.follow";
// The store key a trainer sets when it is done (a restarted shard does not wait for it).
inline std::string done_key(int trainer) { return "ps/done/" + std::to_string(trainer); }

// Declares a key with its initial value (this shard's part of it). The first declaration
// wins; a later one of the same shape is accepted and changes nothing (every trainer may
// declare the model it built from the same seed); another shape is refused, naming the key.
struct DeclareRequest {
  std::string name;
  at::Tensor init;  // dense: the whole tensor; table: this shard's rows
  bool table = false;
  std::int64_t global_rows = 0;  // table: rows over all shards (for range errors)
  MSGPACK_DEFINE(name, init, table, global_rows);
};

struct PullRequest {
  std::vector<std::string> names;
  MSGPACK_DEFINE(names);
};
struct PullReply {
  std::vector<at::Tensor> values;
  std::int64_t round = 0;  // sync: the rounds the shard has closed; 0 in async and SSP
  MSGPACK_DEFINE(values, round);
};

// Every push is applied exactly once. A trainer's client numbers its pushes 1, 2, 3 ... (seq)
// and sends every shard the same id for one push; a retry resends it unchanged. A shard keeps,
// per trainer, the incarnation of its process and the last push whose outcome is final there
// (in its snapshots too), and answers a push it has already seen with that outcome without
// applying it again (PushReply::duplicate). A push from an earlier process of the trainer, or
// older than the last, is refused.
struct PushId {
  int trainer = 0;
  std::int64_t incarnation = 1;  // the trainer process's (RpcAgent::incarnation)
  std::int64_t seq = 0;          // from 1
  MSGPACK_DEFINE(trainer, incarnation, seq);
  bool operator==(const PushId& o) const {
    return trainer == o.trainer && incarnation == o.incarnation && seq == o.seq;
  }
};

// Gradients for dense keys. round: the last round this trainer saw from this shard (sync: a
// push for a closed round is late). fetch: answer with the keys' new values.
struct PushRequest {
  PushId id;
  std::int64_t round = 0;
  std::vector<std::string> names;
  std::vector<at::Tensor> grads;
  bool fetch = true;
  MSGPACK_DEFINE(id, round, names, grads, fetch);
};
struct PushReply {
  std::int64_t round = 0;          // sync: the round the push was applied in (or the last closed, when dropped); else 0
  std::int64_t clock = 0;          // async and SSP: the pushing trainer's pushes applied here so far; 0 in sync
  bool dropped = false;            // sync, late pushes dropped: this push was not applied
  bool duplicate = false;          // this push had reached the shard before: answered, not applied again
  std::vector<at::Tensor> values;  // fetch: the new values, in the order of names
  MSGPACK_DEFINE(round, clock, dropped, duplicate, values);
};

// Sync rounds over several shards: shard 0, the leader, decides which pushes make each round
// and which are dropped as late, and tells the other shards (ps.decide) before it answers its
// own pushes; they apply exactly those pushes, so one step of the model holds the same trainers
// on every shard. Decisions of one leader process are numbered by the round they close.
struct Decision {
  enum Kind : int { Quorum = 0, Timeout = 1, Departure = 2, Drop = 3 };
  std::int64_t leader = 1;       // the leader process's incarnation
  std::int64_t first_round = 1;  // the first round this leader process closes (its snapshot's + 1)
  std::int64_t round = 0;        // the round a close makes (the leader's count); 0 for a drop
  int kind = Quorum;             // why the round closed, or Drop
  std::vector<PushId> pushes;    // the round's pushes, or the one dropped
  MSGPACK_DEFINE(leader, first_round, round, kind, pushes);
};
// ps.follow(leader, round): a restarted follower asks the leader for its decisions after round
// `round` of leader process `leader` -- the last one the follower's snapshot holds -- and
// replays them with the pushes that reach it again (the trainers' retries).
inline constexpr std::size_t kRecentDecisions = 1024;  // rounds a leader keeps for that
struct FollowReply {
  std::int64_t leader = 1;       // the leader process's incarnation
  std::int64_t round = 0;        // rounds it has closed
  std::vector<Decision> recent;  // its decisions after the one asked for, as far as it keeps them
  std::vector<PushId> decided;   // per trainer: the last push it decided (seq 0: none)
  MSGPACK_DEFINE(leader, round, recent, decided);
};

// Rows of a table, as this shard's local row numbers (the client maps global ones).
struct RowsRequest {
  std::string table;
  at::Tensor rows;  // int64 [n]
  MSGPACK_DEFINE(table, rows);
};
struct RowsPush {
  PushId id;
  std::int64_t round = 0;
  std::string table;
  at::Tensor rows;   // int64 [n]; a row named twice gets both gradients, summed, and one step
  at::Tensor grads;  // [n, dim]
  MSGPACK_DEFINE(id, round, table, rows, grads);
};

struct KeyStats {
  std::string name;
  bool table = false;
  std::int64_t pushes = 0, pulls = 0, bytes_in = 0, bytes_out = 0, updates = 0;
  std::vector<std::int64_t> hot_rows;        // table: the most pushed rows (global ids), hottest first
  std::vector<std::int64_t> hot_row_pushes;  // their push counts
  MSGPACK_DEFINE(name, table, pushes, pulls, bytes_in, bytes_out, updates, hot_rows, hot_row_pushes);
};
struct TrainerStats {
  int trainer = 0;
  std::int64_t pushes = 0, late = 0, clock = 0, max_staleness = 0;
  bool gone = false;
  std::int64_t duplicates = 0;  // pushes that arrived again (a retry): answered, not applied
  MSGPACK_DEFINE(trainer, pushes, late, clock, max_staleness, gone, duplicates);
};
struct ShardStats {
  int shard = 0;
  std::int64_t rounds = 0, closed_quorum = 0, closed_timeout = 0, closed_departure = 0;
  std::int64_t snapshots = 0;        // written by this process
  std::int64_t restored_round = -1;  // the snapshot's round this process started from (-1: none)
  std::vector<KeyStats> keys;
  std::vector<TrainerStats> trainers;
  MSGPACK_DEFINE(shard, rounds, closed_quorum, closed_timeout, closed_departure, snapshots, restored_round, keys,
                 trainers);
};

}  // namespace distrl::training::ps
