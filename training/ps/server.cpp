#include "training/ps/server.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "training/ps/detail/shard_entry.h"

namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

ServerOptions::Mode parse_mode(const std::string& mode) {
  if (mode == "sync") return ServerOptions::Mode::Sync;
  if (mode == "async") return ServerOptions::Mode::Async;
  if (mode == "ssp") return ServerOptions::Mode::Ssp;
  throw ConfigError("ps: consistency '" + mode + "' is not known (sync, async or ssp)");
}

void check_options(const ServerOptions& o, int num_trainers) {
  if (o.quorum < 0 || o.quorum > num_trainers)
    throw ConfigError("ps.quorum: " + std::to_string(o.quorum) + " is not in [0, " + std::to_string(num_trainers) +
                      "] (0: every trainer present)");
  if (o.staleness < 0) throw ConfigError("ps.staleness must not be negative");
  const auto& k = o.optimizer.kind;
  if (k != "sgd" && k != "adagrad" && k != "adam")
    throw ConfigError("ps optimizer '" + k + "' is not known (sgd, adagrad or adam)");
}

namespace {

// eps < 0 in an OptimizerSpec means LibTorch's default for the kind; the shard's own optimizer
// code reads eps as it is.
ServerOptions with_default_eps(ServerOptions o) {
  o.optimizer.eps = o.optimizer.eps_or_default();
  return o;
}

}  // namespace

ShardServer::ShardServer(int shard, int num_shards, int num_trainers, int first_trainer_rank, ServerOptions options)
    : shard_(shard), num_shards_(num_shards), num_trainers_(num_trainers), first_trainer_rank_(first_trainer_rank),
      opt_(with_default_eps(std::move(options))),
      sync_shards_(opt_.mode == ServerOptions::Mode::Sync && num_shards > 1) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards || num_trainers < 1)
    throw ConfigError("ps: a shard needs 0 <= shard < shards and at least one trainer");
  check_options(opt_, num_trainers);
  pushed_.assign(num_trainers, 0);
  trainers_.resize(num_trainers);
  last_.resize(num_trainers);
  decided_before_.resize(num_trainers);
  dropped_ahead_.resize(num_trainers);
  for (int t = 0; t < num_trainers; ++t) trainers_[t].trainer = t;
  counters_.shard = shard;
  snapshot_time_ = Clock::now();
  timer_ = std::thread([this] {
    name_this_thread("ps-timer");
    timer_loop();
  });
}

ShardServer::~ShardServer() { stop(); }

void ShardServer::register_on(transport::RpcAgent& agent, const std::shared_ptr<ShardServer>& server) {
  auto s = server;
  agent.register_function(kDeclare, [s](DeclareRequest r) { return s->declare(std::move(r)); });
  agent.register_function(kPull, [s](PullRequest r) { return s->pull(r); });
  agent.register_function(kPush, [s](PushRequest r) { return s->push(std::move(r)); });
  agent.register_function(kPullRows, [s](RowsRequest r) { return s->pull_rows(r); });
  agent.register_function(kPushRows, [s](RowsPush r) { return s->push_rows(std::move(r)); });
  agent.register_function(kStats, [s]() { return s->stats(); });
  agent.register_function(kBye, [s](int trainer) {
    s->bye(trainer);
    return true;
  });
  agent.register_function(kDecide, [s](Decision d) { return s->decide(std::move(d)); });
  agent.register_function(kFollow, [s](std::int64_t leader, std::int64_t round) { return s->follow(leader, round); });
  {
    std::lock_guard<std::mutex> lock(s->mu_);
    s->agent_ = &agent;
    s->self_ = server;
    s->incarnation_ = agent.incarnation();
    for (Decision& d : s->recent_) {  // restored: this process sends them again
      d.leader = s->incarnation_;
      d.first_round = s->first_round_;
    }
  }
  if (s->leads())
    s->set_decision_sink([&agent](int shard, const Decision& d) {
      return agent.rpc_async<bool>(shard, kDecide, d);  // shard k is rank k
    });
  if (s->follows() && agent.incarnation() > 1) s->await_leader();  // its earlier process applied rounds
}

void ShardServer::watch_trainers(transport::RpcAgent& agent) {
  for (int t = 0; t < num_trainers_; ++t) agent.watch(first_trainer_rank_ + t);
  Outcome again;
  {
    std::lock_guard<std::mutex> lock(mu_);
    agent_ = &agent;
    if (leads() && counters_.restored_round >= 0)  // a restarted leader: its last rounds may not have reached them
      again.decisions.assign(recent_.begin(), recent_.end());
  }
  finish(std::move(again));
  std::int64_t applied_leader = 0, applied_round = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (following_) return;
    applied_leader = leader_;
    applied_round = next_round_ - 1;
  }
  // A restarted follower: where does the leader stand? (It may be restarting too: retry.)
  const int leader = 0;  // shard 0's rank
  const auto until = Clock::now() + opt_.decision_wait;
  for (;;) {
    try {
      take_follow(agent.rpc_sync<FollowReply>(transport::Target(leader, std::chrono::seconds(5)), kFollow,
                                              applied_leader, applied_round));
      return;
    } catch (const TransportError& e) {
      if (Clock::now() > until)
        throw TransportError("ps shard " + std::to_string(shard_) + ": the leader shard 0 (rank " +
                             std::to_string(leader) + ") did not say where its rounds stand within " +
                             std::to_string(opt_.decision_wait.count()) + " ms (ps decision_wait): " + e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
}

void ShardServer::stop() {
  std::vector<Held> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    left.swap(held_);
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  const auto stopping = std::make_exception_ptr(TransportError("ps shard " + std::to_string(shard_) + " is stopping"));
  for (auto& h : left) {
    h.promise.set_error(stopping);
    for (auto& p : h.resent) p.set_error(stopping);
  }
  if (!opt_.snapshot_path.empty()) {
    try {
      snapshot();
    } catch (const std::exception& e) {
      DISTRL_LOG(Error, "ps shard " << shard_ << ": the last snapshot failed: " << e.what());
    }
  }
}

void ShardServer::check_trainer(int trainer) const {
  if (trainer < 0 || trainer >= num_trainers_)
    throw ProtocolError("ps: trainer id " + std::to_string(trainer) + " is out of range [0, " +
                        std::to_string(num_trainers_) + ")");
}

void ShardServer::check_push(const PushId& id) const {
  check_trainer(id.trainer);
  if (id.incarnation < 1 || id.seq < 1)
    throw ProtocolError("ps: push id of trainer " + std::to_string(id.trainer) + " has incarnation " +
                        std::to_string(id.incarnation) + " and seq " + std::to_string(id.seq) + " (both count from 1)");
}

ShardServer::Entry& ShardServer::entry_locked(const std::string& name, const char* what) {
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw Error(std::string("ps shard ") + std::to_string(shard_) + ": " + what + " of '" + name +
                "', which is not declared here (declare every key before pulling or pushing it)");
  return *it->second;
}

std::int64_t ShardServer::declare(DeclareRequest req) {
  if (req.name.empty()) throw ProtocolError("ps: a key needs a name");
  if (!req.init.defined() || !req.init.is_floating_point())
    throw ProtocolError("ps: key '" + req.name + "': the initial value must be a floating-point tensor, not " +
                        shape_of(req.init));
  if (req.table && (req.init.dim() != 2 || req.init.size(0) != rows_here(req.global_rows)))
    throw ProtocolError("ps: table '" + req.name + "' of " + std::to_string(req.global_rows) +
                        " global rows must be [" + std::to_string(rows_here(req.global_rows)) + ", dim] on shard " +
                        std::to_string(shard_) + " of " + std::to_string(num_shards_) +
                        " (rows k, k + shards, ...), not " + shape_of(req.init));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(req.name);
  if (it != entries_.end()) {
    const Entry& e = *it->second;
    if (e.table != req.table || !e.value.sizes().equals(req.init.sizes()) ||
        e.value.scalar_type() != req.init.scalar_type())
      throw ConfigError("ps: key '" + req.name + "' is declared as " + shape_of(e.value) + (e.table ? " (table)" : "") +
                        ", not " + shape_of(req.init) + (req.table ? " (table)" : "") +
                        ": every trainer must build the same model");
    return e.stats.updates;
  }
  auto e = std::make_unique<Entry>();
  e->name = req.name;
  e->value = req.init.clone().contiguous();
  e->table = req.table;
  e->global_rows = req.table ? req.global_rows : 0;
  e->stats.name = req.name;
  e->stats.table = req.table;
  if (req.table) e->row_pushes = at::zeros({e->value.size(0)}, at::kLong);
  entries_[req.name] = std::move(e);
  return 0;
}

std::vector<at::Tensor> ShardServer::values_locked(const std::vector<Entry*>& fetch) {
  std::vector<at::Tensor> out;
  out.reserve(fetch.size());
  for (Entry* e : fetch) {
    out.push_back(e->value.clone());  // a snapshot: the next round changes the value in place
    e->stats.pulls++;
    e->stats.bytes_out += bytes_of(out.back());
  }
  return out;
}

PullReply ShardServer::pull(const PullRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry*> fetch;
  for (const auto& n : req.names) fetch.push_back(&entry_locked(n, "pull"));
  PullReply r;
  r.values = values_locked(fetch);
  r.round = opt_.mode == ServerOptions::Mode::Sync ? round_ : 0;
  return r;
}

std::int64_t ShardServer::rows_here(std::int64_t global_rows) const {
  return global_rows > shard_ ? (global_rows - shard_ + num_shards_ - 1) / num_shards_ : 0;
}

at::Tensor ShardServer::check_rows(const Entry& e, const at::Tensor& rows) const {
  if (!e.table) throw ProtocolError("ps: '" + e.name + "' is a dense key, not a table: use pull/push");
  if (!rows.defined() || rows.dim() != 1 || rows.scalar_type() != at::kLong)
    throw ProtocolError("ps: rows of table '" + e.name + "' must be an int64 vector, not " + shape_of(rows));
  if (rows.numel() == 0) return rows;
  const std::int64_t lo = rows.min().item<std::int64_t>(), hi = rows.max().item<std::int64_t>();
  const std::int64_t n = e.value.size(0);
  if (lo < 0 || hi >= n) {
    const std::int64_t bad = lo < 0 ? lo : hi;
    throw ArgumentError("ps: row " + std::to_string(bad * num_shards_ + shard_) + " of table '" + e.name +
                        "' is out of range [0, " + std::to_string(e.global_rows) + ")");
  }
  return rows.contiguous();
}

at::Tensor ShardServer::pull_rows(const RowsRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry_locked(req.table, "pull_rows");
  const at::Tensor rows = check_rows(e, req.rows);
  // A gather with rows fetched ahead (index_select waits on each row's miss in turn).
  at::Tensor out = at::empty({rows.numel(), e.value.size(1)}, e.value.options());
  const std::int64_t* id = rows.data_ptr<std::int64_t>();
  const std::int64_t n = rows.numel();
  const auto row_bytes = static_cast<std::size_t>(e.value.size(1)) * e.value.element_size();
  const char* from = static_cast<const char*>(e.value.data_ptr());
  char* to = static_cast<char*>(out.data_ptr());
  for (std::int64_t j = 0; j < n; ++j) {
    if (j + kPrefetchRows < n) prefetch_row(from + id[j + kPrefetchRows] * row_bytes, row_bytes);
    std::memcpy(to + j * row_bytes, from + id[j] * row_bytes, row_bytes);
  }
  e.stats.pulls++;
  e.stats.bytes_out += bytes_of(out);
  return out;
}

transport::Future<PushReply> ShardServer::push(PushRequest req) {
  check_push(req.id);
  if (req.names.size() != req.grads.size())
    throw ProtocolError("ps: a push names " + std::to_string(req.names.size()) + " keys but carries " +
                        std::to_string(req.grads.size()) + " gradients");
  std::vector<Update> ups;
  std::vector<Entry*> fetch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t i = 0; i < req.names.size(); ++i) {
      Entry& e = entry_locked(req.names[i], "push");
      if (e.table) throw ProtocolError("ps: '" + e.name + "' is a table: push its rows with push_rows");
      const at::Tensor& g = req.grads[i];
      if (!g.defined() || !g.sizes().equals(e.value.sizes()) || g.scalar_type() != e.value.scalar_type())
        throw ProtocolError("ps: the gradient pushed for '" + e.name + "' is " + shape_of(g) + ", the key is " +
                            shape_of(e.value));
      ups.push_back(Update{&e, at::Tensor(), g});
      if (req.fetch) fetch.push_back(&e);
    }
  }
  return submit(req.id, req.round, std::move(ups), std::move(fetch));
}

transport::Future<PushReply> ShardServer::push_rows(RowsPush req) {
  check_push(req.id);
  std::vector<Update> ups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entry_locked(req.table, "push_rows");
    const at::Tensor rows = check_rows(e, req.rows);
    const at::Tensor& g = req.grads;
    if (!g.defined() || g.dim() != 2 || g.size(0) != rows.numel() || g.size(1) != e.value.size(1) ||
        g.scalar_type() != e.value.scalar_type())
      throw ProtocolError("ps: the gradient rows pushed for table '" + e.name + "' are " + shape_of(g) + "; " +
                          std::to_string(rows.numel()) + " rows of " + shape_of(e.value) + " were expected");
    ups.push_back(Update{&e, rows, g});
  }
  return submit(req.id, req.round, std::move(ups), {});
}

void ShardServer::leave_locked(int trainer, const std::string& why, Outcome& out) {
  TrainerStats& t = trainers_[trainer];
  if (t.gone) return;
  t.gone = true;
  if (!why.empty())
    DISTRL_LOG(Warn, "ps shard " << shard_ << ": trainer " << trainer << " (rank " << first_trainer_rank_ + trainer
                                 << ") " << why << "; it leaves the quorum (" << present_locked()
                                 << " trainer(s) present)");
  cv_.notify_all();
  if (opt_.mode == ServerOptions::Mode::Ssp) release_ssp_locked(out);
  if (opt_.mode != ServerOptions::Mode::Sync) return;
  if (follows()) follow_locked(out);  // a push of its that a decision names will not come
  else if (quorum_reached_locked()) close_round_locked(Close::Departure, out);
}

void ShardServer::bye(int trainer) {
  check_trainer(trainer);
  Outcome out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leave_locked(trainer, "", out);
  }
  finish(std::move(out));
}

void ShardServer::wait_for_trainers() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopped_ || present_locked() == 0; });
}

ShardStats ShardServer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ShardStats s = counters_;
  s.trainers = trainers_;
  for (const auto& kv : entries_) {
    const Entry& e = *kv.second;
    KeyStats k = e.stats;
    if (e.table && e.row_pushes.numel() > 0) {
      const auto n = std::min<std::int64_t>(opt_.hot_rows, e.row_pushes.numel());
      auto top = e.row_pushes.topk(n);
      at::Tensor counts = std::get<0>(top), rows = std::get<1>(top);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto c = counts[i].item<std::int64_t>();
        if (c == 0) break;
        k.hot_rows.push_back(rows[i].item<std::int64_t>() * num_shards_ + shard_);
        k.hot_row_pushes.push_back(c);
      }
    }
    s.keys.push_back(std::move(k));
  }
  return s;
}

void ShardServer::timer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    auto until = Clock::now() + std::chrono::milliseconds(100);
    if (auto deadline = round_deadline_locked()) until = std::min(until, *deadline);
    cv_.wait_until(lock, until);
    if (stopped_) break;
    Outcome out;
    const bool ask_leader = timer_tick_locked(out);
    if (!out.done.empty() || !out.decisions.empty() || ask_leader) {
      lock.unlock();
      finish(std::move(out));
      if (ask_leader) refollow();
      lock.lock();
    }
    if (snapshot_due_locked()) {
      lock.unlock();
      try {
        snapshot();
      } catch (const std::exception& e) {  // the shard keeps serving; the last good snapshot stays
        DISTRL_LOG(Error, e.what());
      }
      lock.lock();
    }
  }
}

// max_wait, departed trainers (their connection dropped: the process exited or was killed), and
// a follower's decision that waits too long for a push. True: a follower should ask the leader
// where its rounds stand (refollow).
bool ShardServer::timer_tick_locked(Outcome& out) {
  if (auto deadline = round_deadline_locked(); deadline && Clock::now() >= *deadline)
    close_round_locked(Close::Timeout, out);
  for (int t = 0; t < num_trainers_ && agent_; ++t) {
    if (trainers_[t].gone) continue;
    bool lost = false;
    try {
      lost = agent_->connection_lost(first_trainer_rank_ + t);
    } catch (const std::exception&) {}
    if (lost) leave_locked(t, "is gone (its connection was lost: the process exited or was killed)", out);
  }
  if (!follows()) return false;
  follow_locked(out);
  const bool stalled = following_ && agent_ && !refollowing_ && (!held_.empty() || !decisions_.empty()) &&
                       Clock::now() - last_progress_ > kRefollowAfter;
  if (stalled) refollowing_ = true;
  return stalled;
}

}  // namespace distrl::training::ps
