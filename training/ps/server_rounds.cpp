#include "training/ps/server.h"

#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "common/error.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "training/ps/detail/shard_entry.h"

// Sync rounds: one shard's quorum, max_wait, late pushes and departures; over several shards
// the leader's decisions and the followers that apply them (server.h says the rules).
namespace distrl::training::ps {

using Clock = std::chrono::steady_clock;

int ShardServer::present_locked() const {
  int n = 0;
  for (const auto& t : trainers_) n += t.gone ? 0 : 1;
  return n;
}

bool ShardServer::quorum_reached_locked() const {
  if (held_.empty() || follows()) return false;
  const int present = present_locked();
  const int need = std::max(1, opt_.quorum == 0 ? present : std::min(opt_.quorum, present));
  return pushers_ >= need;
}

std::optional<Clock::time_point> ShardServer::round_deadline_locked() const {
  if (opt_.mode != ServerOptions::Mode::Sync || follows() || opt_.max_wait.count() == 0 || held_.empty())
    return std::nullopt;
  return first_push_ + opt_.max_wait;
}

void ShardServer::accumulate_locked(const std::vector<Update>& ups) {
  for (const auto& u : ups) {
    Entry& e = *u.entry;
    if (u.rows.defined() && u.rows.numel() == 0) continue;  // a clock tick: a zero gradient
    if (u.rows.defined()) {
      e.acc_rows.push_back(u.rows);
      e.acc_grads.push_back(u.grad);
    } else if (!e.acc.defined()) {
      e.acc = u.grad.clone();
    } else {
      e.acc.add_(u.grad);
    }
  }
}

// A push answered as dropped: it changes nothing here.
void ShardServer::drop_locked(Held h, Outcome& out) {
  remember_locked(h.id, /*dropped=*/true);
  h.ups.clear();
  h.reply.round = round_;
  h.reply.dropped = true;
  h.reply.values = values_locked(h.fetch);
  out.done.push_back(std::move(h));
}

void ShardServer::accept_sync_locked(Held h, std::int64_t round, Outcome& out) {
  const int t = h.id.trainer;
  TrainerStats& ts = trainers_[t];
  if (follows()) {
    if (dropped_ahead_[t] == h.id) {  // the leader dropped it before it got here
      drop_locked(std::move(h), out);
      return;
    }
    if (lost_locked(h.id)) {
      DISTRL_LOG(Warn, "ps shard " << shard_ << ": push " << h.id.seq << " of trainer " << t
                                   << " was in a round of shard 0 too old to replay after this shard restarted: "
                                      "answered as dropped");
      drop_locked(std::move(h), out);
      return;
    }
    held_.push_back(std::move(h));  // until the leader says which round it is in
    follow_locked(out);
    return;
  }
  const bool late = round < round_;
  if (late) ts.late++;
  if (late && !opt_.fold_late) {
    if (leads()) out.decisions.push_back(Decision{incarnation_, first_round_, 0, Decision::Drop, {h.id}});
    drop_locked(std::move(h), out);
    return;
  }
  accumulate_locked(h.ups);
  h.ups.clear();
  if (pushers_ == 0 && held_.empty()) {
    first_push_ = Clock::now();
    cv_.notify_all();  // the timer learns the round's deadline
  }
  if (!pushed_[t]) {
    pushed_[t] = 1;
    ++pushers_;
  }
  held_.push_back(std::move(h));
  if (quorum_reached_locked()) close_round_locked(Close::Quorum, out);
}

// The accumulated round's mean (its sum over `pushes`, protocol rule), applied; a round counted.
void ShardServer::apply_round_locked(std::size_t pushes, Close why) {
  const double n = static_cast<double>(std::max<std::size_t>(1, pushes));
  for (auto& kv : entries_) {
    Entry& e = *kv.second;
    if (e.table && !e.acc_rows.empty()) {
      apply_locked(e, at::cat(e.acc_rows), at::cat(e.acc_grads).div_(n));  // repeats summed there
      e.acc_rows.clear();
      e.acc_grads.clear();
    } else if (!e.table && e.acc.defined()) {
      apply_locked(e, at::Tensor(), e.acc.div_(n));
      e.acc = at::Tensor();
    }
  }
  ++round_;
  ++progress_;
  ++counters_.rounds;
  switch (why) {
    case Close::Quorum: ++counters_.closed_quorum; break;
    case Close::Timeout: ++counters_.closed_timeout; break;
    case Close::Departure: ++counters_.closed_departure; break;
    case Close::Drop: break;
  }
}

// The round's pushes get the new values; each is final now.
void ShardServer::answer_round_locked(std::vector<Held>& pushes, Outcome& out) {
  for (auto& h : pushes) remember_locked(h.id, false);
  if (failpoint("ps.shard.crash_before_answer")) crash_after_snapshot_locked();
  for (auto& h : pushes) {
    h.ups.clear();
    h.reply.round = round_;
    h.reply.values = values_locked(h.fetch);
    out.done.push_back(std::move(h));
  }
}

void ShardServer::close_round_locked(Close why, Outcome& out) {
  std::vector<Held> pushes;
  pushes.swap(held_);
  apply_round_locked(pushes.size(), why);
  std::fill(pushed_.begin(), pushed_.end(), 0);
  pushers_ = 0;
  if (leads()) {
    Decision d{incarnation_, first_round_, round_, why, {}};
    for (const auto& h : pushes) d.pushes.push_back(h.id);
    out.decisions.push_back(d);
    recent_.push_back(std::move(d));
    if (recent_.size() > kRecentDecisions) recent_.pop_front();
  }
  answer_round_locked(pushes, out);
}

bool ShardServer::final_here_locked(const PushId& id) const {
  const LastPush& last = last_[id.trainer];
  return last.incarnation > id.incarnation || (last.incarnation == id.incarnation && id.seq <= last.seq);
}

// A copy reached the leader again: its followers may still wait for the decision about it (the
// leader restarted after deciding): drops and the last round are sent again (both idempotent).
void ShardServer::decision_again_locked(const PushId& id, Outcome& out) {
  if (last_[id.trainer].dropped) {
    out.decisions.push_back(Decision{incarnation_, first_round_, 0, Decision::Drop, {id}});
    return;
  }
  for (auto d = recent_.rbegin(); d != recent_.rend(); ++d)
    for (const PushId& p : d->pushes)
      if (p == id) {
        out.decisions.push_back(*d);  // the answer waits until every follower has it
        return;
      }
}

void ShardServer::set_decision_sink(DecisionSink send) {
  std::lock_guard<std::mutex> lock(mu_);
  send_decision_ = std::move(send);
}

// ------------------------------------------------------------------ the follower's side

void ShardServer::check_decision(const Decision& d) const {
  const std::string who = "ps shard " + std::to_string(shard_) + ": a round decision";
  if (d.kind < Decision::Quorum || d.kind > Decision::Drop || d.leader < 1 || d.first_round < 1 ||
      (d.kind != Decision::Drop && d.round < d.first_round) || d.pushes.empty() ||
      d.pushes.size() > 2 * static_cast<std::size_t>(num_trainers_))
    throw ProtocolError(who + " is malformed (kind " + std::to_string(d.kind) + ", round " + std::to_string(d.round) +
                        " from " + std::to_string(d.first_round) + ", " + std::to_string(d.pushes.size()) + " pushes)");
  for (std::size_t i = 0; i < d.pushes.size(); ++i) {
    check_push(d.pushes[i]);
    for (std::size_t j = 0; j < i; ++j)
      if (d.pushes[i] == d.pushes[j])
        throw ProtocolError(who + " for round " + std::to_string(d.round) + " names push " +
                            std::to_string(d.pushes[i].seq) + " of trainer " + std::to_string(d.pushes[i].trainer) +
                            " twice");
  }
}

bool ShardServer::decide(Decision d) {
  const std::string who = "ps shard " + std::to_string(shard_) + ": a round decision";
  check_decision(d);
  Outcome out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!follows()) throw ProtocolError(who + " reached a shard that is not a sync follower");
    if (stopped_) throw TransportError("ps shard " + std::to_string(shard_) + " is stopping");
    if (d.kind == Decision::Drop) {
      drop_decided_locked(d.pushes, out);
    } else if (d.leader >= leader_ && !(d.leader == leader_ && d.round < next_round_ && following_)) {
      if (decisions_.size() >= 4096)
        throw ProtocolError(who + " for round " + std::to_string(d.round) + " finds 4096 waiting: refused");
      const std::pair<std::int64_t, std::int64_t> key{d.leader, d.round};
      decisions_.try_emplace(key, Waiting{std::move(d), Clock::now()});  // a copy sent again keeps its age
      follow_locked(out);
    }  // else: an earlier leader process's or one already applied
  }
  finish(std::move(out));
  return true;
}

void ShardServer::drop_decided_locked(const std::vector<PushId>& ids, Outcome& out) {
  for (const PushId& id : ids) {
    if (final_here_locked(id)) continue;  // answered here already (a decision sent again)
    ++trainers_[id.trainer].late;
    auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.id == id; });
    if (it == held_.end()) {
      dropped_ahead_[id.trainer] = id;  // still on its way here
      continue;
    }
    Held h = std::move(*it);
    held_.erase(it);
    drop_locked(std::move(h), out);
  }
}

// Applies the waiting decisions in the leader's order as far as their pushes have arrived.
// Decisions of an earlier leader process come first (it may have answered their pushes); one
// it never sent leaves a gap, which a newer leader process lets the follower skip: the pushes
// of an unsent decision were not answered by the leader and reach the new one again.
void ShardServer::follow_locked(Outcome& out) {
  while (following_ && !decisions_.empty()) {
    auto it = decisions_.begin();
    const Decision& d = it->second.d;
    if (d.leader < leader_ || (d.leader == leader_ && d.round < next_round_)) {  // replaced, or applied
      decisions_.erase(it);
      continue;
    }
    if (d.leader > leader_) {  // a restarted leader: its rounds from its first
      leader_ = d.leader;
      next_round_ = d.first_round;
      continue;
    }
    if (d.round > next_round_) {
      // The ones between are on their way -- or were lost while this shard could not be
      // reached (the timer asks the leader again, ps.follow) -- unless a newer leader exists.
      if (decisions_.rbegin()->first.first == leader_) return;
      next_round_ = d.round;
    }
    const bool overdue = Clock::now() - it->second.since > opt_.decision_wait;
    if (!follow_one_locked(d, overdue, out)) return;
    decisions_.erase(it);
  }
}

// One round as the leader closed it, once every push it names is here (or cannot come).
bool ShardServer::follow_one_locked(const Decision& d, bool overdue, Outcome& out) {
  std::vector<std::size_t> found;
  std::vector<PushId> absent;
  for (const PushId& id : d.pushes) {
    auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.id == id; });
    if (it != held_.end()) found.push_back(static_cast<std::size_t>(it - held_.begin()));
    else if (final_here_locked(id)) continue;  // named again by a restarted leader, or a re-follow
    else if (overdue || will_not_come_locked(id)) absent.push_back(id);
    else return false;
  }
  ++next_round_;  // before any answer: a snapshot from here on holds this round
  last_progress_ = Clock::now();
  if (found.empty() && absent.empty()) return true;  // a round applied here already (sent again)
  for (const PushId& id : absent) {
    DISTRL_LOG(Warn, "ps shard " << shard_ << ": push " << id.seq << " of trainer " << id.trainer << " is in round "
                                 << d.round << " of shard 0 but never reached this shard ("
                                 << (overdue ? "waited ps decision_wait" : "the trainer is gone or past it")
                                 << "): it counts as a zero gradient here, and a late copy is answered as dropped");
    LastPush& last = last_[id.trainer];
    if (id.incarnation > last.incarnation) last = LastPush{id.incarnation, id.seq, true};
    else remember_locked(id, /*dropped=*/true);
  }
  std::vector<Held> pushes;  // in the leader's order (found's), summed as it summed them
  for (std::size_t i : found) pushes.push_back(std::move(held_[i]));
  std::sort(found.begin(), found.end());
  for (auto i = found.rbegin(); i != found.rend(); ++i) held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(*i));
  for (const auto& h : pushes) accumulate_locked(h.ups);
  // Over all the pushes named, those final here (applied before a leader's restart) counting as
  // zero: each push's weight is the leader's on every shard (server.h).
  apply_round_locked(d.pushes.size(), static_cast<Close>(d.kind));
  answer_round_locked(pushes, out);
  return true;
}

FollowReply ShardServer::follow(std::int64_t leader, std::int64_t round) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!leads()) throw ProtocolError("ps shard " + std::to_string(shard_) + " is not the leader of sync rounds");
  FollowReply r{incarnation_, round_, {}, {}};
  for (const Decision& d : recent_)
    if (d.leader != leader || d.round > round) r.recent.push_back(d);
  for (int t = 0; t < num_trainers_; ++t) r.decided.push_back(PushId{t, last_[t].incarnation, last_[t].seq});
  return r;
}

void ShardServer::await_leader() {
  std::lock_guard<std::mutex> lock(mu_);
  following_ = false;
}

// The leader's answer to ps.follow: its rounds after the last this follower applied (replayed
// with the pushes that reach it again: a restarted follower's snapshot, or rounds whose
// decisions were lost while it could not be reached), and every trainer's last decided push
// -- a push it decided that no such round names was dropped (or is too old to replay).
void ShardServer::take_follow(const FollowReply& r) {
  if (r.decided.size() != static_cast<std::size_t>(num_trainers_) || r.recent.size() > kRecentDecisions)
    throw ProtocolError("ps shard " + std::to_string(shard_) + ": the leader's state names " +
                        std::to_string(r.decided.size()) + " trainers and " + std::to_string(r.recent.size()) +
                        " rounds; this run has " + std::to_string(num_trainers_) + " trainers");
  for (const Decision& d : r.recent) check_decision(d);
  for (const PushId& id : r.decided)
    if (id.trainer < 0 || id.trainer >= num_trainers_)
      throw ProtocolError("ps shard " + std::to_string(shard_) + ": the leader's state names trainer " +
                          std::to_string(id.trainer));
  Outcome out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool first = !following_;
    std::int64_t next = r.recent.empty() ? r.round + 1 : r.recent.front().round;
    if (r.leader == leader_ && following_) next = std::max(next, next_round_);  // never back within one leader
    if (first || r.leader != leader_ || next != next_round_ || !r.recent.empty())
      DISTRL_LOG(Info, "ps shard " << shard_ << ": follows shard 0 (incarnation " << r.leader << ") from its round "
                                   << next << " (" << r.recent.size() << " round(s) from it to replay)");
    leader_ = r.leader;
    next_round_ = next;
    for (auto it = decisions_.begin(); it != decisions_.end();)  // an earlier leader's: replaced
      it = it->first.first < r.leader ? decisions_.erase(it) : std::next(it);
    for (const Decision& d : r.recent)
      if (d.leader == r.leader) decisions_.try_emplace({d.leader, d.round}, Waiting{d, Clock::now()});
    decided_before_ = r.decided;
    following_ = true;
    std::vector<Held> keep;  // pushes that wait here for a decision the leader no longer has
    for (auto& h : held_) {
      if (lost_locked(h.id)) drop_locked(std::move(h), out);
      else keep.push_back(std::move(h));
    }
    held_.swap(keep);
    last_progress_ = Clock::now();
    follow_locked(out);
  }
  finish(std::move(out));
}

// A follower with pushes or decisions waiting and no round applied for kRefollowAfter asks the
// leader again (decisions sent while this shard could not be reached are lost to it). The
// answer is taken on the RPC pool; one question at a time.
void ShardServer::refollow() {
  transport::RpcAgent* agent = nullptr;
  std::int64_t leader = 0, round = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    agent = agent_;
    leader = leader_;
    round = next_round_ - 1;
  }
  std::weak_ptr<ShardServer> weak = self_;
  auto done = [weak] {
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> lock(s->mu_);
      s->refollowing_ = false;
      s->last_progress_ = Clock::now();
    }
  };
  try {
    agent->rpc_async<FollowReply>(transport::Target(0, std::chrono::seconds(5)), kFollow, leader, round)
        .then([weak, done](const transport::Future<FollowReply>& f) {
          if (auto s = weak.lock()) {
            try {
              s->take_follow(f.value());
            } catch (const std::exception& e) {
              DISTRL_LOG(Warn, "ps shard " << s->shard_ << ": asking the leader shard 0 where its rounds stand failed ("
                                           << e.what() << "); asking again later");
            }
          }
          done();
        });
  } catch (const std::exception&) {
    done();
  }
}

// Decided by the leader before this follower asked, and in no decision it still has to apply.
bool ShardServer::lost_locked(const PushId& id) const {
  const PushId& before = decided_before_[id.trainer];
  if (before.incarnation != id.incarnation || id.seq > before.seq) return false;
  for (const auto& kv : decisions_)
    for (const PushId& p : kv.second.d.pushes)
      if (p == id) return false;
  return true;
}

// A push a decision names that cannot reach this shard any more: its trainer is gone, or a
// later push of it (a trainer sends its next push only when every shard answered this one, so
// the first copy was answered by this shard's earlier process) is already here.
bool ShardServer::will_not_come_locked(const PushId& id) const {
  if (trainers_[id.trainer].gone || last_[id.trainer].incarnation > id.incarnation) return true;
  for (const Held& h : held_)
    if (h.id.trainer == id.trainer &&
        (h.id.incarnation > id.incarnation || (h.id.incarnation == id.incarnation && h.id.seq > id.seq)))
      return true;
  return false;
}

}  // namespace distrl::training::ps
