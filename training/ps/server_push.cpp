#include "training/ps/server.h"

#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "training/ps/detail/shard_entry.h"

// A push's way through a shard: exactly once (which copy is new, held or decided), async and
// SSP application, and the answers -- on the leader of several sync shards, once every follower
// has the decisions. Sync rounds are server_rounds.cpp's.
namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

namespace {

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

transport::Future<PushReply> ShardServer::submit(const PushId& id, std::int64_t round, std::vector<Update> ups,
                                                 std::vector<Entry*> fetch) {
  Held h;
  h.id = id;
  h.fetch = std::move(fetch);
  h.ups = std::move(ups);
  auto future = h.promise.get_future();
  Outcome out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) throw TransportError("ps shard " + std::to_string(shard_) + " is stopping");
    TrainerStats& ts = trainers_[id.trainer];
    Held* first = nullptr;
    const Seen seen = seen_locked(id, &first);
    if (ts.gone) ts.gone = false;  // a trainer that came back rejoins
    switch (seen) {
      case Seen::Held:  // the first copy waits for its round (or the slowest): both answer then
        if (first->resent.size() >= kMaxResent)
          throw ProtocolError("ps shard " + std::to_string(shard_) + ": push " + std::to_string(id.seq) +
                              " of trainer " + std::to_string(id.trainer) + " arrived " +
                              std::to_string(kMaxResent + 1) + " times while it waits: refused");
        ++ts.duplicates;
        first->resent.push_back(std::move(h.promise));
        return future;
      case Seen::Decided:
        ++ts.duplicates;
        repeat_locked(std::move(h), out);
        break;
      case Seen::New: accept_locked(std::move(h), round, out); break;
      case Seen::Stale:
        ++ts.duplicates;
        throw ProtocolError("ps shard " + std::to_string(shard_) + ": push " + std::to_string(id.seq) + " of trainer " +
                            std::to_string(id.trainer) + " is older than its last one here (" +
                            std::to_string(last_[id.trainer].seq) + "): a delayed copy, refused");
    }
  }
  finish(std::move(out));
  return future;
}

// Where push id stands here. A newer incarnation of the trainer starts its numbering afresh.
ShardServer::Seen ShardServer::seen_locked(const PushId& id, Held** held) {
  LastPush& last = last_[id.trainer];
  auto who = [&] {  // for refusals only: not built on the per-push path
    return "ps shard " + std::to_string(shard_) + ": push " + std::to_string(id.seq) + " of trainer " +
           std::to_string(id.trainer);
  };
  if (id.incarnation < last.incarnation)
    throw ProtocolError(who() + " comes from its process of incarnation " + std::to_string(id.incarnation) +
                        ", which has been replaced by incarnation " + std::to_string(last.incarnation) + ": refused");
  int waiting = 0, mine = 0;  // its pushes held here; of this incarnation
  for (Held& h : held_) {
    if (h.id.trainer != id.trainer) continue;
    if (h.id == id) {
      *held = &h;
      return Seen::Held;
    }
    ++waiting;
    if (h.id.incarnation == id.incarnation) ++mine;
  }
  // A client sends one push at a time; earlier processes of the trainer may have left one each.
  if (mine > 0 || waiting >= kMaxHeldPerTrainer)
    throw ProtocolError(who() + " arrived while " + std::to_string(waiting) +
                        " of its pushes wait here: a client sends one at a time; refused");
  if (id.incarnation > last.incarnation) {
    last = LastPush{id.incarnation, 0, false};
    return Seen::New;
  }
  if (id.seq > last.seq) return Seen::New;
  if (id.seq < last.seq) return Seen::Stale;
  return Seen::Decided;
}

void ShardServer::remember_locked(const PushId& id, bool dropped) {
  LastPush& last = last_[id.trainer];
  if (id.incarnation != last.incarnation) return;  // a held push of a process replaced meanwhile
  last.seq = std::max(last.seq, id.seq);
  last.dropped = dropped;
}

// A push seen before whose outcome is final: its first outcome with the current values.
void ShardServer::repeat_locked(Held h, Outcome& out) {
  h.ups.clear();
  h.reply.duplicate = true;
  if (opt_.mode == ServerOptions::Mode::Sync) {
    if (leads()) decision_again_locked(h.id, out);
    h.reply.round = round_;
    h.reply.dropped = last_[h.id.trainer].dropped;
    h.reply.values = values_locked(h.fetch);
    out.done.push_back(std::move(h));
    return;
  }
  h.reply.clock = trainers_[h.id.trainer].clock;
  if (opt_.mode == ServerOptions::Mode::Async) {
    h.reply.values = values_locked(h.fetch);
    out.done.push_back(std::move(h));
    return;
  }
  held_.push_back(std::move(h));  // ssp: read when the bound allows, like the first copy
  release_ssp_locked(out);
}

void ShardServer::note_pushed_locked(const std::vector<Update>& ups) {
  for (const auto& u : ups) {
    u.entry->stats.pushes++;
    u.entry->stats.bytes_in += bytes_of(u.grad) + bytes_of(u.rows);
    if (u.rows.defined() && u.rows.numel() > 0) {  // checked rows (check_rows), contiguous
      std::int64_t* count = u.entry->row_pushes.data_ptr<std::int64_t>();
      const std::int64_t* row = u.rows.data_ptr<std::int64_t>();
      for (std::int64_t j = 0, n = u.rows.numel(); j < n; ++j) ++count[row[j]];
    }
  }
}

void ShardServer::accept_locked(Held h, std::int64_t round, Outcome& out) {
  TrainerStats& ts = trainers_[h.id.trainer];
  ts.pushes++;
  if (!first_push_reported_) {
    first_push_reported_ = true;
    DISTRL_LOG(Info, "ps shard " << shard_ << ": first push since the restart from round " << counters_.restored_round
                                 << " arrived " << process_age_s() << " s after this process started");
  }
  note_pushed_locked(h.ups);
  if (opt_.mode == ServerOptions::Mode::Sync) {
    accept_sync_locked(std::move(h), round, out);
    return;
  }
  const std::int64_t slowest = min_clock_locked();
  ts.max_staleness = std::max(ts.max_staleness, ts.clock - slowest);
  for (auto& u : h.ups)
    if (!u.rows.defined() || u.rows.numel() > 0) apply_locked(*u.entry, u.rows, u.grad);
  h.ups.clear();
  ts.clock++;
  ++progress_;
  remember_locked(h.id, false);
  h.reply.clock = ts.clock;
  if (failpoint("ps.shard.crash_before_answer")) crash_after_snapshot_locked();
  if (opt_.mode == ServerOptions::Mode::Async) {
    h.reply.values = values_locked(h.fetch);
    out.done.push_back(std::move(h));
    return;
  }
  held_.push_back(std::move(h));  // ssp: its values are read when it is released
  release_ssp_locked(out);
}

std::int64_t ShardServer::min_clock_locked() const {
  std::int64_t m = -1;
  for (const auto& t : trainers_)
    if (!t.gone && (m < 0 || t.clock < m)) m = t.clock;
  return m < 0 ? 0 : m;
}

void ShardServer::release_ssp_locked(Outcome& out) {
  const std::int64_t slowest = min_clock_locked();
  std::vector<Held> keep;
  for (auto& h : held_) {
    if (trainers_[h.id.trainer].clock - slowest > opt_.staleness) {
      keep.push_back(std::move(h));
      continue;
    }
    h.reply.values = values_locked(h.fetch);  // read now: every trainer's first clock - s pushes
    out.done.push_back(std::move(h));
  }
  held_.swap(keep);
}

void ShardServer::answer(std::vector<Held>& done) {
  for (auto& h : done) {
    for (auto& p : h.resent) {
      PushReply again = h.reply;
      again.duplicate = true;
      p.set_value(std::move(again));
    }
    h.promise.set_value(std::move(h.reply));
  }
}

// Answers what a critical section decided; the leader of several shards first makes sure every
// follower has the decisions (so no answered push can be missing from a follower's rounds).
void ShardServer::finish(Outcome out) {
  if (out.decisions.empty() || !send_decision_) {
    answer(out.done);
    return;
  }
  std::vector<transport::Future<bool>> acks;
  for (const Decision& d : out.decisions)
    for (int f = 1; f < num_shards_; ++f) {
      try {
        acks.push_back(send_decision_(f, d));
      } catch (const std::exception&) {
        acks.push_back(transport::Future<bool>::failed(std::current_exception()));
      }
    }
  auto done = std::make_shared<std::vector<Held>>(std::move(out.done));
  transport::when_all(std::move(acks)).then([done](const transport::Future<std::vector<bool>>& f) {
    static RateLimiter limit(std::chrono::seconds(5));
    long suppressed = 0;
    if (f.error() && limit.allow(&suppressed)) {
      try {
        std::rethrow_exception(f.error());
      } catch (const std::exception& e) {  // that follower catches up with ps.follow when it is back
        DISTRL_LOG(Warn, "ps shard 0: a follower shard did not take a round decision ("
                             << e.what() << ")" << (suppressed ? " (+" + std::to_string(suppressed) + " more)" : ""));
      }
    }
    answer(*done);
  });
}

}  // namespace distrl::training::ps
