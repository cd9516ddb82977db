// A trainer's handle on the sharded parameter server: declares keys, pulls and pushes whole
// tensors (each on the shard its name hashes to) and table rows (row r on shard r % S), and
// fans every call out to the shards at once.
//
//   PsClient ps(agent, {.trainer = 0, .shards = 2});
//   ps.declare("fc.weight", w);  ps.declare_table("emb", table);   // every trainer may declare
//   auto values = ps.push({"fc.weight"}, {grad}).values;           // sync: the round's new values
//   at::Tensor rows = ps.pull_rows("emb", ids);  ps.push_rows("emb", ids, grad_rows);
//
// Errors are typed: an undeclared key, a row out of range or a wrong shape is refused before
// anything is sent (or by the server, with the same words); a server that is down fails the
// call with TransportError naming it (after ClientOptions::retry_for). Every push carries an id
// (protocol.h, PushId: this trainer, its process's incarnation, a sequence number) and a retry
// resends it unchanged, so each shard applies it exactly once: a retry after a lost connection
// to a live shard is answered without being applied again, and one to a restarted shard is
// applied there only when its snapshot does not already hold it (what the shard applied after
// its last snapshot is lost). Thread-safety: one client per trainer process (the ids are per
// client, keyed by trainer and process: a second client of the same trainer in one process
// would number its pushes again and see them answered as copies), used from one thread.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "training/ps/protocol.h"
#include "common/error.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::training::ps {

struct ClientOptions {
  int trainer = 0;  // this trainer's id, 0..N-1
  int shards = 1;   // server processes, ranks first_server..first_server+shards-1
  int first_server = 0;
  // How long a call waits for a shard whose process is gone (it may be restarting) before it
  // fails: the call is retried with backoff (50 ms doubling to 1 s); once the shard answers
  // again this client re-declares its keys there (a no-op where the shard restored a snapshot)
  // and sends the call again. 0: fail at once. Timeouts of a live shard are never retried.
  std::chrono::milliseconds retry_for{0};
};

struct PushResult {
  std::vector<at::Tensor> values;  // fetch: the keys' new values, in the order pushed
  int dropped = 0;                 // shards that dropped this push as late (sync)
};

class PsClient {
 public:
  PsClient(transport::RpcAgent& agent, ClientOptions options);

  int shard_of(const std::string& dense_key) const;
  void declare(const std::string& name, const at::Tensor& init);
  void declare_table(const std::string& name, const at::Tensor& init);  // [rows, dim]
  std::vector<at::Tensor> pull(const std::vector<std::string>& names);
  // Every shard hears from every push (an empty one where it holds none of the keys or rows),
  // so a push is one tick of this trainer's clock on all shards.
  PushResult push(const std::vector<std::string>& names, const std::vector<at::Tensor>& grads, bool fetch = true);
  // rows: int64 [n] of global row ids (repeats allowed); returns [n, dim].
  at::Tensor pull_rows(const std::string& table, const at::Tensor& rows);
  // grads: [n, dim]; a row named twice gets both gradients. Sync: returns when the round closes.
  void push_rows(const std::string& table, const at::Tensor& rows, const at::Tensor& grads);
  std::vector<ShardStats> stats();
  // Tells every shard this trainer is done (it leaves the quorum). Best effort.
  void bye();

 private:
  struct Split {                                    // a request's rows split by shard
    std::vector<at::Tensor> positions, local_rows;  // per shard: where in the request, which local rows
  };
  Split split_rows(const std::string& table, const at::Tensor& rows) const;
  int rank_of(int shard) const { return opt_.first_server + shard; }
  // f's value; when shard k's process is gone and retry_for allows, waits for it to come back,
  // re-declares there and takes the value of send() (a fresh call) instead.
  template <typename T, typename Send>
  T await(int k, transport::Future<T> f, const Send& send);
  void wait_for_shard(int k, const TransportError& why);
  struct Declared {
    std::string name;
    at::Tensor value;  // aliases what the trainer declared (its current values re-declare)
    bool table = false;
  };
  std::vector<Declared> declared_;
  DeclareRequest declare_request(const Declared& d, int k) const;  // k's part of d
  void note_round(int k, std::int64_t round);
  PushId next_push_id();
  std::int64_t pushes_ = 0;              // pushes made (push and push_rows): the last PushId::seq
  std::vector<std::uint8_t> restarted_;  // per shard: came back since its last answer

  transport::RpcAgent& agent_;
  ClientOptions opt_;
  std::map<std::string, std::int64_t> table_rows_;  // global rows of each declared table
  std::map<std::string, std::int64_t> table_dim_;
  std::vector<std::int64_t> rounds_;  // per shard: rounds closed as last seen
};

}  // namespace distrl::training::ps
