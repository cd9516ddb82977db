#include "training/ps/server.h"

#include <torch/torch.h>

#include <csignal>
#include <filesystem>

#include <unistd.h>

#include "common/error.h"
#include "common/log.h"
#include "models/checkpoint.h"
#include "training/ps/detail/shard_entry.h"

// A shard's snapshots: what it holds, written atomically by one writer at a time, and read back
// by a restarted shard before any trainer reaches it.
namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

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
  at::Tensor last;    // int64 [trainers, 3]: incarnation, seq, dropped of each trainer's last push
  // the leader of several sync shards: its recent rounds, a row per push: round, kind, trainer,
  // incarnation, seq (a restarted leader sends them again to followers that lack them)
  at::Tensor decisions;
  std::int64_t follow_leader = 0, follow_round = 0;  // a follower: the leader's round applied last
};

ShardServer::Saved ShardServer::save_locked() const {
  Saved out;
  out.round = round_;
  out.progress = progress_;
  std::vector<std::int64_t> clocks;
  for (const auto& t : trainers_) clocks.push_back(t.clock);
  out.clocks = at::tensor(clocks, at::kLong);
  std::vector<std::int64_t> last;
  for (const LastPush& l : last_) last.insert(last.end(), {l.incarnation, l.seq, l.dropped ? 1 : 0});
  out.last = at::tensor(last, at::kLong).view({num_trainers_, 3});
  if (leads() && !recent_.empty()) {
    std::vector<std::int64_t> rows;
    for (const Decision& d : recent_)
      for (const PushId& id : d.pushes) rows.insert(rows.end(), {d.round, d.kind, id.trainer, id.incarnation, id.seq});
    out.decisions = at::tensor(rows, at::kLong).view({-1, 5});
  }
  if (follows()) {
    out.follow_leader = leader_;
    out.follow_round = next_round_ - 1;
  }
  auto copy = [](const at::Tensor& t) { return t.defined() ? t.clone() : t; };
  for (const auto& kv : entries_) {
    const Entry& e = *kv.second;
    out.keys.push_back(
        Saved::Key{e.name, e.table, e.global_rows, e.value.clone(), copy(e.m1), copy(e.m2), copy(e.steps)});
  }
  return out;
}

void ShardServer::write_snapshot(const Saved& saved, const std::string& path) {
  torch::serialize::OutputArchive ar;
  ar.write("shard", c10::IValue(static_cast<std::int64_t>(shard_)));
  ar.write("shards", c10::IValue(static_cast<std::int64_t>(num_shards_)));
  ar.write("round", c10::IValue(saved.round));
  ar.write("progress", c10::IValue(saved.progress));
  ar.write("clocks", saved.clocks, /*is_buffer=*/true);
  ar.write("last_push", saved.last, /*is_buffer=*/true);
  if (saved.decisions.defined()) ar.write("decisions", saved.decisions, /*is_buffer=*/true);
  if (saved.follow_leader > 0) {
    ar.write("follow_leader", c10::IValue(saved.follow_leader));
    ar.write("follow_round", c10::IValue(saved.follow_round));
  }
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
  write_snapshot(saved, opt_.snapshot_path);
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.snapshots;
}

bool ShardServer::snapshot_due_locked() const {
  if (opt_.snapshot_path.empty() || progress_ == snapshot_progress_) return false;
  if (opt_.snapshot_rounds > 0 && progress_ - snapshot_progress_ >= opt_.snapshot_rounds) return true;
  return opt_.snapshot_every.count() > 0 && Clock::now() - snapshot_time_ >= opt_.snapshot_every;
}

// The recent decisions of a snapshot's rows (round, kind, trainer, incarnation, seq), checked.
std::deque<Decision> ShardServer::decisions_from(const at::Tensor& rows, const std::string& where) const {
  if (rows.dim() != 2 || rows.size(1) != 5 || rows.scalar_type() != at::kLong)
    throw Error(where + ": its round decisions are " + c10::str(rows.sizes()) + " " + c10::str(rows.scalar_type()) +
                ", not int64 [pushes, 5]");
  std::deque<Decision> out;
  const auto r = rows.accessor<std::int64_t, 2>();
  for (std::int64_t i = 0; i < rows.size(0); ++i) {
    if (out.empty() || out.back().round != r[i][0])
      out.push_back(Decision{1, 1, r[i][0], static_cast<int>(r[i][1]), {}});
    out.back().pushes.push_back(PushId{static_cast<int>(r[i][2]), r[i][3], r[i][4]});
  }
  try {
    for (Decision& d : out) {
      d.first_round = d.round;
      check_decision(d);
    }
  } catch (const ProtocolError& e) {
    throw Error(where + ": " + e.what());
  }
  return out;
}

std::int64_t ShardServer::restore(const std::string& path) {
  const std::string where = "ps shard " + std::to_string(shard_) + ": snapshot " + path;
  if (!std::filesystem::exists(path))
    throw Error(where + " does not exist (a restarted server needs one: set ps.snapshot_rounds or ps.snapshot_s)");
  torch::serialize::InputArchive ar;
  std::vector<std::unique_ptr<Entry>> loaded;
  std::int64_t round = 0, progress = 0;
  at::Tensor clocks, last, decisions;
  std::int64_t follow_leader = 0, follow_round = 0;
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
    ar.try_read("last_push", last, true);  // absent in snapshots written before pushes had ids
    ar.try_read("decisions", decisions, true);
    if (ar.try_read("follow_leader", v)) {
      follow_leader = v.toInt();
      ar.read("follow_round", v);
      follow_round = v.toInt();
    }
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
      // The optimizer steps a table's rows through raw pointers: its state must match its value.
      const auto like_value = [&](const at::Tensor& s) {
        return !s.defined() || (s.sizes().equals(e->value.sizes()) && s.scalar_type() == e->value.scalar_type());
      };
      const bool fits = e->value.is_floating_point() && (!e->table || e->value.dim() == 2) && like_value(e->m1) &&
                        like_value(e->m2) &&
                        (!e->steps.defined() || (e->steps.scalar_type() == at::kDouble && e->steps.dim() == 1 &&
                                                 e->steps.size(0) == (e->table ? e->value.size(0) : 1)));
      if (!fits)
        throw Error("key '" + e->name + "' has optimizer state of another shape or type than its value " +
                    shape_of(e->value) + " (a damaged snapshot?)");
      if (e->table && e->value.size(0) != rows_here(e->global_rows))
        throw Error("table '" + e->name + "' has " + std::to_string(e->value.size(0)) + " rows here, not the " +
                    std::to_string(rows_here(e->global_rows)) + " of its " + std::to_string(e->global_rows) +
                    " global rows this shard holds (a damaged snapshot?)");
      for (at::Tensor* t : {&e->value, &e->m1, &e->m2, &e->steps})
        if (t->defined()) *t = t->contiguous();
      if (e->table) e->row_pushes = at::zeros({e->value.size(0)}, at::kLong);
      loaded.push_back(std::move(e));
    }
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(where + " cannot be read (" + e.what() + ")");
  }
  if (clocks.dim() != 1 || clocks.scalar_type() != at::kLong || clocks.numel() != num_trainers_ ||
      (last.defined() && (!last.sizes().equals({num_trainers_, 3}) || last.scalar_type() != at::kLong)))
    throw Error(where + " has " + std::to_string(clocks.numel()) + " trainers' clocks, this run has " +
                std::to_string(num_trainers_) + " trainers");
  std::deque<Decision> recent;
  if (decisions.defined() && leads()) recent = decisions_from(decisions, where);
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  for (auto& e : loaded) entries_[e->name] = std::move(e);
  round_ = round;
  progress_ = snapshot_progress_ = progress;
  snapshot_time_ = Clock::now();
  if (!last.defined()) last = at::zeros({num_trainers_, 3}, at::kLong);  // written before pushes had ids
  const auto l = last.accessor<std::int64_t, 2>();
  const auto c = clocks.accessor<std::int64_t, 1>();
  for (int t = 0; t < num_trainers_; ++t) {
    trainers_[t].clock = c[t];
    last_[t] = LastPush{l[t][0], l[t][1], l[t][2] != 0};
  }
  counters_.restored_round = round;
  first_round_ = round + 1;
  recent_ = std::move(recent);  // its followers may lack these rounds: they are sent again, from the first
  if (!recent_.empty()) first_round_ = recent_.front().round;
  if (follow_leader > 0 && follows()) {
    leader_ = follow_leader;
    next_round_ = follow_round + 1;
  }
  first_push_reported_ = false;
  return round;
}

// Failpoint ps.shard.crash_before_answer: dies with a snapshot of what it applied, before it
// answers -- the moment a retry most needs exactly once. Its own temporary file (the timer may be
// writing the usual one); dies whatever happens.
void ShardServer::crash_after_snapshot_locked() {
  if (!opt_.snapshot_path.empty()) {
    try {
      write_snapshot(save_locked(), opt_.snapshot_path + ".crash");
      std::filesystem::rename(opt_.snapshot_path + ".crash", opt_.snapshot_path);
    } catch (const std::exception& e) {
      DISTRL_LOG(Error, "ps shard " << shard_ << ": the failpoint's snapshot failed: " << e.what());
    }
  }
  ::raise(SIGKILL);
  ::_exit(128 + SIGKILL);
}

}  // namespace distrl::training::ps
