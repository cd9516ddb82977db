#include "training/ps/server.h"

#include <torch/torch.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "models/checkpoint.h"

namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

struct ShardServer::Entry {
  std::string name;
  at::Tensor value;  // dense: the tensor; table: this shard's rows [local_rows, dim]
  bool table = false;
  std::int64_t global_rows = 0;
  // optimizer state (zeros on first use): sgd momentum / adagrad sum / adam m (m1), adam v (m2);
  // steps: a count (dense) or one per local row (table, float64 [rows])
  at::Tensor m1, m2, steps;
  // the open sync round
  at::Tensor acc;  // dense: summed gradients
  std::vector<at::Tensor> acc_rows, acc_grads;
  int acc_pushes = 0;
  // statistics
  KeyStats stats;
  at::Tensor row_pushes;  // table: int64 [local_rows]
};

ServerOptions::Mode parse_mode(const std::string& mode) {
  if (mode == "sync") return ServerOptions::Mode::Sync;
  if (mode == "async") return ServerOptions::Mode::Async;
  if (mode == "ssp") return ServerOptions::Mode::Ssp;
  throw ConfigError("ps: consistency '" + mode + "' is not known (sync, async or ssp)");
}

namespace {

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

std::int64_t bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; }

// Seconds since this process started (/proc/self/stat's start time against /proc/uptime).
double process_age_s() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string line;
  double up = 0;
  if (!std::getline(stat, line) || !(uptime >> up)) return -1;
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return up - std::stod(field) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return -1;
}

}  // namespace

ShardServer::ShardServer(int shard, int num_shards, int num_trainers, int first_trainer_rank, ServerOptions options)
    : shard_(shard), num_shards_(num_shards), num_trainers_(num_trainers), first_trainer_rank_(first_trainer_rank),
      opt_(std::move(options)) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards || num_trainers < 1)
    throw ConfigError("ps: a shard needs 0 <= shard < shards and at least one trainer");
  if (opt_.quorum < 0 || opt_.quorum > num_trainers)
    throw ConfigError("ps.quorum: " + std::to_string(opt_.quorum) + " is not in [0, " + std::to_string(num_trainers) +
                      "] (0: every trainer present)");
  if (opt_.staleness < 0) throw ConfigError("ps.staleness must not be negative");
  const auto& k = opt_.optimizer.kind;
  if (k != "sgd" && k != "adagrad" && k != "adam")
    throw ConfigError("ps optimizer '" + k + "' is not known (sgd, adagrad or adam)");
  pushed_.assign(num_trainers, 0);
  trainers_.resize(num_trainers);
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
}

void ShardServer::watch_trainers(transport::RpcAgent& agent) {
  for (int t = 0; t < num_trainers_; ++t) agent.watch(first_trainer_rank_ + t);
  std::lock_guard<std::mutex> lock(mu_);
  agent_ = &agent;
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
  for (auto& h : left)
    h.promise.set_error(std::make_exception_ptr(TransportError("ps shard " + std::to_string(shard_) + " is stopping")));
  if (!opt_.snapshot_path.empty()) {
    try {
      snapshot();
    } catch (const std::exception& e) {
      DISTRL_LOG(Error, "ps shard " << shard_ << ": the last snapshot failed: " << e.what());
    }
  }
}

// ------------------------------------------------------------------ snapshots

struct ShardServer::Saved {
  struct Key {
    std::string name;
    bool table = false;
    std::int64_t global_rows = 0;
    at::Tensor value, m1, m2, steps;
  };
  std::vector<Key> keys;
  std::int64_t round = 0, progress = 0;
  at::Tensor clocks;  // int64 [trainers]
};

ShardServer::Saved ShardServer::save_locked() const {
  Saved out;
  out.round = round_;
  out.progress = progress_;
  std::vector<std::int64_t> clocks;
  for (const auto& t : trainers_) clocks.push_back(t.clock);
  out.clocks = at::tensor(clocks, at::kLong);
  auto copy = [](const at::Tensor& t) { return t.defined() ? t.clone() : t; };
  for (const auto& kv : entries_) {
    const Entry& e = *kv.second;
    out.keys.push_back(Saved::Key{e.name, e.table, e.global_rows, e.value.clone(), copy(e.m1), copy(e.m2), copy(e.steps)});
  }
  return out;
}

void ShardServer::write_snapshot(const Saved& saved) {
  namespace fs = std::filesystem;
  const std::string& path = opt_.snapshot_path;
  torch::serialize::OutputArchive ar;
  ar.write("shard", c10::IValue(static_cast<std::int64_t>(shard_)));
  ar.write("shards", c10::IValue(static_cast<std::int64_t>(num_shards_)));
  ar.write("round", c10::IValue(saved.round));
  ar.write("progress", c10::IValue(saved.progress));
  ar.write("clocks", saved.clocks, /*is_buffer=*/true);
  ar.write("keys", c10::IValue(static_cast<std::int64_t>(saved.keys.size())));
  for (std::size_t i = 0; i < saved.keys.size(); ++i) {
    const auto& k = saved.keys[i];
    torch::serialize::OutputArchive a;
    a.write("name", c10::IValue(k.name));
    a.write("table", c10::IValue(k.table));
    a.write("global_rows", c10::IValue(k.global_rows));
    a.write("value", k.value, true);
    if (k.m1.defined()) a.write("m1", k.m1, true);
    if (k.m2.defined()) a.write("m2", k.m2, true);
    if (k.steps.defined()) a.write("steps", k.steps, true);
    ar.write("key" + std::to_string(i), a);
  }
  try {
    models::save_archive(ar, path);  // the last good snapshot stays whole when this fails
  } catch (const OutputError& e) {
    throw OutputError("ps shard " + std::to_string(shard_) + ": snapshot: " + e.what());
  }
}

void ShardServer::snapshot() {
  if (opt_.snapshot_path.empty()) throw ConfigError("ps: snapshots need a path (ServerOptions::snapshot_path)");
  std::lock_guard<std::mutex> writing(snapshot_mu_);
  Saved saved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    saved = save_locked();
    snapshot_progress_ = progress_;
    snapshot_time_ = Clock::now();
  }
  write_snapshot(saved);
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.snapshots;
}

bool ShardServer::snapshot_due_locked() const {
  if (opt_.snapshot_path.empty() || progress_ == snapshot_progress_) return false;
  if (opt_.snapshot_rounds > 0 && progress_ - snapshot_progress_ >= opt_.snapshot_rounds) return true;
  return opt_.snapshot_every.count() > 0 && Clock::now() - snapshot_time_ >= opt_.snapshot_every;
}

std::int64_t ShardServer::restore(const std::string& path) {
  const std::string where = "ps shard " + std::to_string(shard_) + ": snapshot " + path;
  if (!std::filesystem::exists(path))
    throw Error(where + " does not exist (a restarted server needs one: set ps.snapshot_rounds or ps.snapshot_s)");
  torch::serialize::InputArchive ar;
  std::vector<std::unique_ptr<Entry>> loaded;
  std::int64_t round = 0, progress = 0;
  at::Tensor clocks;
  try {
    ar.load_from(path);
    c10::IValue v;
    ar.read("shard", v);
    const auto shard = v.toInt();
    ar.read("shards", v);
    if (shard != shard_ || v.toInt() != num_shards_)
      throw Error("it is shard " + std::to_string(shard) + " of " + std::to_string(v.toInt()) + ", this is shard " +
                  std::to_string(shard_) + " of " + std::to_string(num_shards_));
    ar.read("round", v);
    round = v.toInt();
    ar.read("progress", v);
    progress = v.toInt();
    ar.read("clocks", clocks, true);
    ar.read("keys", v);
    const auto n = v.toInt();
    for (std::int64_t i = 0; i < n; ++i) {
      torch::serialize::InputArchive a;
      ar.read("key" + std::to_string(i), a);
      auto e = std::make_unique<Entry>();
      a.read("name", v);
      e->name = v.toStringRef();
      a.read("table", v);
      e->table = v.toBool();
      a.read("global_rows", v);
      e->global_rows = v.toInt();
      a.read("value", e->value, true);
      a.try_read("m1", e->m1, true);
      a.try_read("m2", e->m2, true);
      a.try_read("steps", e->steps, true);
      e->stats.name = e->name;
      e->stats.table = e->table;
      if (e->table) e->row_pushes = at::zeros({e->value.size(0)}, at::kLong);
      loaded.push_back(std::move(e));
    }
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(where + " cannot be read (" + e.what() + ")");
  }
  if (clocks.numel() != num_trainers_)
    throw Error(where + " has " + std::to_string(clocks.numel()) + " trainers' clocks, this run has " +
                std::to_string(num_trainers_) + " trainers");
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  for (auto& e : loaded) entries_[e->name] = std::move(e);
  round_ = round;
  progress_ = snapshot_progress_ = progress;
  snapshot_time_ = Clock::now();
  for (int t = 0; t < num_trainers_; ++t) trainers_[t].clock = clocks[t].item<std::int64_t>();
  counters_.restored_round = round;
  first_push_reported_ = false;
  return round;
}

void ShardServer::check_trainer(int trainer) const {
  if (trainer < 0 || trainer >= num_trainers_)
    throw ProtocolError("ps: trainer id " + std::to_string(trainer) + " is out of range [0, " +
                        std::to_string(num_trainers_) + ")");
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
  if (req.table && (req.init.dim() != 2 || req.global_rows < req.init.size(0)))
    throw ProtocolError("ps: table '" + req.name + "' must be [rows, dim] with global_rows >= its rows here, not " +
                        shape_of(req.init));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(req.name);
  if (it != entries_.end()) {
    const Entry& e = *it->second;
    if (e.table != req.table || !e.value.sizes().equals(req.init.sizes()) || e.value.scalar_type() != req.init.scalar_type())
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
  at::Tensor out = e.value.index_select(0, rows);
  e.stats.pulls++;
  e.stats.bytes_out += bytes_of(out);
  return out;
}

transport::Future<PushReply> ShardServer::push(PushRequest req) {
  check_trainer(req.trainer);
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
  return submit(req.trainer, req.round, std::move(ups), std::move(fetch));
}

transport::Future<PushReply> ShardServer::push_rows(RowsPush req) {
  check_trainer(req.trainer);
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
  return submit(req.trainer, req.round, std::move(ups), {});
}

transport::Future<PushReply> ShardServer::submit(int trainer, std::int64_t round, std::vector<Update> ups,
                                                  std::vector<Entry*> fetch) {
  transport::Promise<PushReply> promise;
  auto future = promise.get_future();
  std::vector<Held> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) throw TransportError("ps shard " + std::to_string(shard_) + " is stopping");
    TrainerStats& ts = trainers_[trainer];
    ts.pushes++;
    if (!first_push_reported_) {
      first_push_reported_ = true;
      DISTRL_LOG(Info, "ps shard " << shard_ << ": first push since the restart from round " << counters_.restored_round
                                   << " arrived " << process_age_s() << " s after this process started");
    }
    if (ts.gone) ts.gone = false;  // a trainer that came back rejoins
    for (auto& u : ups) {
      u.entry->stats.pushes++;
      u.entry->stats.bytes_in += bytes_of(u.grad) + bytes_of(u.rows);
      if (u.rows.defined() && u.rows.numel() > 0)
        u.entry->row_pushes.index_add_(0, u.rows, at::ones({u.rows.numel()}, at::kLong));
    }
    if (opt_.mode == ServerOptions::Mode::Sync) {
      const bool late = round < round_;
      if (late) ts.late++;
      if (late && !opt_.fold_late) {
        PushReply r;
        r.round = round_;
        r.dropped = true;
        r.values = values_locked(fetch);
        promise.set_value(std::move(r));
        return future;
      }
      for (auto& u : ups) {
        Entry& e = *u.entry;
        if (u.rows.defined() && u.rows.numel() == 0) continue;  // a clock tick only
        if (u.rows.defined()) {
          e.acc_rows.push_back(u.rows);
          e.acc_grads.push_back(u.grad);
        } else if (!e.acc.defined()) {
          e.acc = u.grad.clone();
        } else {
          e.acc.add_(u.grad);
        }
        e.acc_pushes++;
      }
      if (pushers_ == 0 && held_.empty()) {
        first_push_ = Clock::now();
        cv_.notify_all();  // the timer learns the round's deadline
      }
      if (!pushed_[trainer]) {
        pushed_[trainer] = 1;
        ++pushers_;
      }
      held_.push_back(Held{trainer, std::move(fetch), std::move(promise), {}});
      if (quorum_reached_locked()) done = close_round_locked(Close::Quorum);
    } else {
      const std::int64_t slowest = min_clock_locked();
      ts.max_staleness = std::max(ts.max_staleness, ts.clock - slowest);
      for (auto& u : ups)
        if (!u.rows.defined() || u.rows.numel() > 0) apply_locked(*u.entry, u.rows, u.grad);
      ts.clock++;
      ++progress_;
      PushReply r;
      r.round = ts.clock;
      r.values = values_locked(fetch);
      if (opt_.mode == ServerOptions::Mode::Async) {
        promise.set_value(std::move(r));
        return future;
      }
      held_.push_back(Held{trainer, {}, std::move(promise), std::move(r)});
      done = release_ssp_locked();
    }
  }
  answer(done);
  return future;
}

void ShardServer::apply_locked(Entry& e, const at::Tensor& rows, at::Tensor g) {
  at::NoGradGuard no_grad;
  const auto& o = opt_.optimizer;
  const bool sparse = rows.defined();
  at::Tensor p = sparse ? e.value.index_select(0, rows) : e.value;
  if (o.weight_decay != 0) g = g + o.weight_decay * p;
  auto state = [&](at::Tensor& s) {
    if (!s.defined()) s = at::zeros_like(e.value);
    return sparse ? s.index_select(0, rows) : s;
  };
  auto put = [&](at::Tensor& s, const at::Tensor& v) {
    if (sparse) s.index_copy_(0, rows, v);
  };
  // Step counts: one per row for tables (a row's Adam bias correction counts its own updates).
  at::Tensor t;
  if (o.kind != "sgd") {
    if (!e.steps.defined()) e.steps = at::zeros({sparse ? e.value.size(0) : 1}, at::kDouble);
    if (sparse) {
      e.steps.index_add_(0, rows, at::ones({rows.numel()}, at::kDouble));
      std::vector<std::int64_t> shape(static_cast<std::size_t>(p.dim()), 1);
      shape[0] = rows.numel();
      t = e.steps.index_select(0, rows).view(shape).to(p.scalar_type());
    } else {
      e.steps.add_(1);
    }
  }
  if (o.kind == "sgd") {
    at::Tensor upd = g;
    if (o.momentum != 0) {
      at::Tensor buf = state(e.m1);
      buf.mul_(o.momentum).add_(g);
      put(e.m1, buf);
      upd = o.nesterov ? g + o.momentum * buf : buf;
    }
    p.sub_(upd, o.lr);
  } else if (o.kind == "adagrad") {
    at::Tensor sum = state(e.m1);
    sum.addcmul_(g, g);
    put(e.m1, sum);
    if (sparse) {
      at::Tensor clr = o.lr / (1 + (t - 1) * o.lr_decay);
      p.sub_(clr * g / (sum.sqrt() + o.eps));
    } else {
      const double step = e.steps.item<double>();
      p.addcdiv_(g, sum.sqrt().add_(o.eps), -o.lr / (1 + (step - 1) * o.lr_decay));
    }
  } else {  // adam
    at::Tensor m = state(e.m1), v = state(e.m2);
    m.mul_(o.beta1).add_(g, 1 - o.beta1);
    v.mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
    put(e.m1, m);
    put(e.m2, v);
    if (sparse) {
      at::Tensor bc1 = 1 - at::pow(o.beta1, t), bc2 = 1 - at::pow(o.beta2, t);
      p.sub_(o.lr * m / bc1 / (v.sqrt() / bc2.sqrt() + o.eps));
    } else {
      const double step = e.steps.item<double>();
      const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
      p.addcdiv_(m, v.sqrt().div_(std::sqrt(bc2)).add_(o.eps), -o.lr / bc1);
    }
  }
  if (sparse) e.value.index_copy_(0, rows, p);
  e.stats.updates++;
}

int ShardServer::present_locked() const {
  int n = 0;
  for (const auto& t : trainers_) n += t.gone ? 0 : 1;
  return n;
}

bool ShardServer::quorum_reached_locked() const {
  if (held_.empty()) return false;
  const int present = present_locked();
  const int need = std::max(1, opt_.quorum == 0 ? present : std::min(opt_.quorum, present));
  return pushers_ >= need;
}

std::vector<ShardServer::Held> ShardServer::close_round_locked(Close why) {
  for (auto& kv : entries_) {
    Entry& e = *kv.second;
    if (e.acc_pushes == 0) continue;
    const double n = e.acc_pushes;
    if (e.table) {
      at::Tensor rows = at::cat(e.acc_rows), grads = at::cat(e.acc_grads);
      at::Tensor unique, inverse;
      std::tie(unique, inverse, std::ignore) = at::_unique2(rows, /*sorted=*/true, /*return_inverse=*/true);
      at::Tensor summed = at::zeros({unique.numel(), grads.size(1)}, grads.options()).index_add_(0, inverse, grads);
      apply_locked(e, unique, summed.div_(n));
      e.acc_rows.clear();
      e.acc_grads.clear();
    } else {
      apply_locked(e, at::Tensor(), e.acc.div_(n));
      e.acc = at::Tensor();
    }
    e.acc_pushes = 0;
  }
  ++round_;
  ++progress_;
  ++counters_.rounds;
  switch (why) {
    case Close::Quorum: ++counters_.closed_quorum; break;
    case Close::Timeout: ++counters_.closed_timeout; break;
    case Close::Departure: ++counters_.closed_departure; break;
  }
  std::fill(pushed_.begin(), pushed_.end(), 0);
  pushers_ = 0;
  std::vector<Held> done;
  done.swap(held_);
  for (auto& h : done) {
    h.reply.round = round_;
    h.reply.values = values_locked(h.fetch);
  }
  return done;
}

std::int64_t ShardServer::min_clock_locked() const {
  std::int64_t m = -1;
  for (const auto& t : trainers_)
    if (!t.gone && (m < 0 || t.clock < m)) m = t.clock;
  return m < 0 ? 0 : m;
}

std::vector<ShardServer::Held> ShardServer::release_ssp_locked() {
  const std::int64_t slowest = min_clock_locked();
  std::vector<Held> done, keep;
  for (auto& h : held_) {
    if (trainers_[h.trainer].clock - slowest <= opt_.staleness) done.push_back(std::move(h));
    else keep.push_back(std::move(h));
  }
  held_.swap(keep);
  return done;
}

void ShardServer::answer(std::vector<Held>& done) {
  for (auto& h : done) h.promise.set_value(std::move(h.reply));
}

void ShardServer::leave_locked(int trainer, const std::string& why, std::vector<Held>* done) {
  TrainerStats& t = trainers_[trainer];
  if (t.gone) return;
  t.gone = true;
  if (!why.empty())
    DISTRL_LOG(Warn, "ps shard " << shard_ << ": trainer " << trainer << " (rank " << first_trainer_rank_ + trainer
                                 << ") " << why << "; it leaves the quorum (" << present_locked()
                                 << " trainer(s) present)");
  cv_.notify_all();
  if (opt_.mode == ServerOptions::Mode::Sync) {
    if (quorum_reached_locked()) *done = close_round_locked(Close::Departure);
  } else if (opt_.mode == ServerOptions::Mode::Ssp) {
    *done = release_ssp_locked();
  }
}

void ShardServer::bye(int trainer) {
  check_trainer(trainer);
  std::vector<Held> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leave_locked(trainer, "", &done);
  }
  answer(done);
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
    const bool timed = opt_.mode == ServerOptions::Mode::Sync && opt_.max_wait.count() > 0 && !held_.empty();
    if (timed) until = std::min(until, first_push_ + opt_.max_wait);
    cv_.wait_until(lock, until);
    if (stopped_) break;
    std::vector<Held> done;
    if (opt_.mode == ServerOptions::Mode::Sync && opt_.max_wait.count() > 0 && !held_.empty() &&
        Clock::now() >= first_push_ + opt_.max_wait)
      done = close_round_locked(Close::Timeout);
    // Departed trainers: their connection dropped (the process exited or was killed).
    for (int t = 0; t < num_trainers_ && agent_; ++t) {
      if (trainers_[t].gone) continue;
      bool lost = false;
      try {
        lost = agent_->connection_lost(first_trainer_rank_ + t);
      } catch (const std::exception&) {
      }
      if (lost) {
        std::vector<Held> more;
        leave_locked(t, "is gone (its connection was lost: the process exited or was killed)", &more);
        for (auto& h : more) done.push_back(std::move(h));
      }
    }
    if (!done.empty()) {
      lock.unlock();
      answer(done);
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

}  // namespace distrl::training::ps
