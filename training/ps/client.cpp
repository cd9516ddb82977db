#include "training/ps/client.h"

#include <torch/torch.h>

#include <algorithm>
#include <thread>

#include "common/error.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "transport/bootstrap/store.h"

namespace distrl::training::ps {

namespace {

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

PsClient::PsClient(transport::RpcAgent& agent, ClientOptions options) : agent_(agent), opt_(options) {
  if (opt_.shards < 1) throw ConfigError("ps: at least one server shard is needed");
  rounds_.assign(opt_.shards, 0);
  restarted_.assign(opt_.shards, 0);
}

DeclareRequest PsClient::declare_request(const Declared& d, int k) const {
  DeclareRequest r;
  r.name = d.name;
  r.table = d.table;
  if (!d.table) {
    r.init = d.value.contiguous();
    return r;
  }
  // Local row j of shard k is global row j * S + k.
  r.global_rows = d.value.size(0);
  r.init = d.value.slice(0, k, d.value.size(0), opt_.shards).contiguous();
  return r;
}

template <typename T, typename Send>
T PsClient::await(int k, transport::Future<T> f, const Send& send) {
  for (;;) {
    try {
      return f.value();
    } catch (const TimeoutError&) {
      throw;  // a live shard that is slow: sending again could apply a push twice
    } catch (const TransportError& e) {
      if (opt_.retry_for.count() == 0) throw;
      wait_for_shard(k, e);
      f = send();
    }
  }
}

void PsClient::wait_for_shard(int k, const TransportError& why) {
  using Clock = std::chrono::steady_clock;
  const int rank = rank_of(k);
  const auto until = Clock::now() + opt_.retry_for;
  const std::string who = "ps shard " + std::to_string(k) + " (rank " + std::to_string(rank) + ")";
  DISTRL_LOG(Warn, "ps trainer " << opt_.trainer << ": " << who << " is unreachable (" << why.what()
                                 << "); retrying for up to " << opt_.retry_for.count() / 1000.0 << " s");
  for (auto pause = std::chrono::milliseconds(50);; pause = std::min(pause * 2, std::chrono::milliseconds(1000))) {
    if (Clock::now() + pause > until)
      throw TransportError(who + " did not come back within " + std::to_string(opt_.retry_for.count()) +
                           " ms (ps retry_for): " + why.what());
    std::this_thread::sleep_for(pause);
    if (agent_.connection_lost(rank)) continue;  // no new process has rejoined under its rank yet
    try {
      for (const Declared& d : declared_)
        if (d.table || shard_of(d.name) == k) agent_.rpc_sync<std::int64_t>(rank, kDeclare, declare_request(d, k));
    } catch (const TimeoutError&) {
      throw;
    } catch (const TransportError&) {
      continue;
    }
    restarted_[k] = 1;
    DISTRL_LOG(Info, "ps trainer " << opt_.trainer << ": " << who << " answers again; carrying on");
    return;
  }
}

int PsClient::shard_of(const std::string& key) const {
  return opt_.shards == 1 ? 0 : static_cast<int>(fnv1a(key) % static_cast<std::uint64_t>(opt_.shards));
}

void PsClient::declare(const std::string& name, const at::Tensor& init) {
  Declared d{name, init.detach(), false};
  agent_.rpc_sync<std::int64_t>(rank_of(shard_of(name)), kDeclare, declare_request(d, shard_of(name)));
  declared_.push_back(std::move(d));
}

void PsClient::declare_table(const std::string& name, const at::Tensor& init) {
  if (init.dim() != 2) throw ArgumentError("ps: table '" + name + "' must be [rows, dim]");
  Declared d{name, init.detach(), true};
  std::vector<transport::Future<std::int64_t>> fs;
  for (int k = 0; k < opt_.shards; ++k)
    fs.push_back(agent_.rpc_async<std::int64_t>(rank_of(k), kDeclare, declare_request(d, k)));
  for (auto& f : fs) f.value();
  table_rows_[name] = init.size(0);
  table_dim_[name] = init.size(1);
  declared_.push_back(std::move(d));
}

std::vector<at::Tensor> PsClient::pull(const std::vector<std::string>& names) {
  std::vector<std::vector<std::size_t>> where(opt_.shards);
  std::vector<PullRequest> reqs(opt_.shards);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int k = shard_of(names[i]);
    where[k].push_back(i);
    reqs[k].names.push_back(names[i]);
  }
  std::vector<transport::Future<PullReply>> fs(opt_.shards);
  for (int k = 0; k < opt_.shards; ++k)
    if (!reqs[k].names.empty()) fs[k] = agent_.rpc_async<PullReply>(rank_of(k), kPull, reqs[k]);
  std::vector<at::Tensor> out(names.size());
  for (int k = 0; k < opt_.shards; ++k) {
    if (reqs[k].names.empty()) continue;
    PullReply r = await(k, fs[k], [&] { return agent_.rpc_async<PullReply>(rank_of(k), kPull, reqs[k]); });
    if (r.values.size() != where[k].size())
      throw ProtocolError("ps shard " + std::to_string(k) + " answered a pull of " + std::to_string(where[k].size()) +
                          " keys with " + std::to_string(r.values.size()));
    note_round(k, r.round);
    for (std::size_t j = 0; j < where[k].size(); ++j) out[where[k][j]] = std::move(r.values[j]);
  }
  return out;
}

PushResult PsClient::push(const std::vector<std::string>& names, const std::vector<at::Tensor>& grads, bool fetch) {
  if (names.size() != grads.size())
    throw ArgumentError("ps: push of " + std::to_string(names.size()) + " keys with " + std::to_string(grads.size()) +
                        " gradients");
  std::vector<std::vector<std::size_t>> where(opt_.shards);
  std::vector<PushRequest> reqs(opt_.shards);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int k = shard_of(names[i]);
    where[k].push_back(i);
    reqs[k].names.push_back(names[i]);
    reqs[k].grads.push_back(grads[i].detach().contiguous());
  }
  // Every shard hears from every push, with no keys where this push has none: a push is one
  // tick of this trainer's clock everywhere (sync rounds and ssp clocks stay aligned across
  // shards even when a push touches only some of them).
  std::vector<transport::Future<PushReply>> fs(opt_.shards);
  const PushId id = next_push_id();
  for (int k = 0; k < opt_.shards; ++k) {
    reqs[k].id = id;
    reqs[k].round = rounds_[k];
    reqs[k].fetch = fetch;
    fs[k] = agent_.rpc_async<PushReply>(rank_of(k), kPush, reqs[k]);
  }
  if (failpoint("ps.client.resend"))  // tests: a retry that overtakes nothing -- the first copy is live
    for (int k = 0; k < opt_.shards; ++k) fs[k] = agent_.rpc_async<PushReply>(rank_of(k), kPush, reqs[k]);
  PushResult out;
  if (fetch) out.values.resize(names.size());
  for (int k = 0; k < opt_.shards; ++k) {
    PushReply r = await(k, fs[k], [&] { return agent_.rpc_async<PushReply>(rank_of(k), kPush, reqs[k]); });
    note_round(k, r.round);
    out.dropped += r.dropped ? 1 : 0;
    if (!fetch || where[k].empty()) continue;
    if (r.values.size() != where[k].size())
      throw ProtocolError("ps shard " + std::to_string(k) + " answered a push of " + std::to_string(where[k].size()) +
                          " keys with " + std::to_string(r.values.size()) + " values");
    for (std::size_t j = 0; j < where[k].size(); ++j) out.values[where[k][j]] = std::move(r.values[j]);
  }
  return out;
}

PsClient::Split PsClient::split_rows(const std::string& table, const at::Tensor& rows) const {
  auto it = table_rows_.find(table);
  if (it == table_rows_.end())
    throw ArgumentError("ps: table '" + table + "' was not declared by this trainer (declare_table it first)");
  if (!rows.defined() || rows.dim() != 1 || rows.scalar_type() != at::kLong)
    throw ArgumentError("ps: rows of table '" + table + "' must be an int64 vector");
  // One pass over the ids: the range check and each shard's count; a second fills each shard's
  // positions and local rows (row r lives on shard r % shards as local row r / shards).
  const at::Tensor ids = rows.to(at::kCPU).contiguous();
  const std::int64_t* id = ids.data_ptr<std::int64_t>();
  const std::int64_t n = ids.numel(), shards = opt_.shards;
  std::int64_t lo = 0, hi = 0;
  std::vector<std::int64_t> count(static_cast<std::size_t>(shards), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = id[i];
    lo = i == 0 ? r : std::min(lo, r);
    hi = i == 0 ? r : std::max(hi, r);
    if (r >= 0) ++count[static_cast<std::size_t>(r % shards)];
  }
  if (n > 0 && (lo < 0 || hi >= it->second))
    throw ArgumentError("ps: row " + std::to_string(lo < 0 ? lo : hi) + " of table '" + table +
                        "' is out of range [0, " + std::to_string(it->second) + ")");
  Split s;
  std::vector<std::int64_t*> pos, local;
  for (std::int64_t k = 0; k < shards; ++k) {
    s.positions.push_back(at::empty({count[static_cast<std::size_t>(k)]}, at::kLong));
    s.local_rows.push_back(at::empty({count[static_cast<std::size_t>(k)]}, at::kLong));
    pos.push_back(s.positions.back().data_ptr<std::int64_t>());
    local.push_back(s.local_rows.back().data_ptr<std::int64_t>());
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(id[i] % shards);
    *pos[k]++ = i;
    *local[k]++ = id[i] / shards;
  }
  return s;
}

at::Tensor PsClient::pull_rows(const std::string& table, const at::Tensor& rows) {
  const Split s = split_rows(table, rows);
  std::vector<transport::Future<at::Tensor>> fs(opt_.shards);
  for (int k = 0; k < opt_.shards; ++k)
    if (s.positions[k].numel() > 0)
      fs[k] = agent_.rpc_async<at::Tensor>(rank_of(k), kPullRows, RowsRequest{table, s.local_rows[k]});
  at::Tensor out = at::empty({rows.numel(), table_dim_.at(table)});
  for (int k = 0; k < opt_.shards; ++k) {
    if (s.positions[k].numel() == 0) continue;
    at::Tensor part = await(k, fs[k], [&] {
      return agent_.rpc_async<at::Tensor>(rank_of(k), kPullRows, RowsRequest{table, s.local_rows[k]});
    });
    if (part.dim() != 2 || part.size(0) != s.positions[k].numel() || part.size(1) != out.size(1))
      throw ProtocolError("ps shard " + std::to_string(k) + " answered pull_rows of table '" + table +
                          "' with a tensor of the wrong shape");
    if (out.scalar_type() != part.scalar_type()) out = out.to(part.scalar_type());
    out.index_copy_(0, s.positions[k], part);
  }
  return out;
}

void PsClient::push_rows(const std::string& table, const at::Tensor& rows, const at::Tensor& grads) {
  const Split s = split_rows(table, rows);
  if (grads.dim() != 2 || grads.size(0) != rows.numel())
    throw ArgumentError("ps: push_rows of table '" + table + "' needs one gradient row per row id");
  const at::Tensor g = grads.detach();
  std::vector<transport::Future<PushReply>> fs(opt_.shards);
  std::vector<RowsPush> ps(opt_.shards);
  const PushId id = next_push_id();
  for (int k = 0; k < opt_.shards; ++k) {  // every shard, as in push(): one clock tick each
    RowsPush& p = ps[k];
    p.id = id;
    p.round = rounds_[k];
    p.table = table;
    p.rows = s.local_rows[k];
    p.grads = g.index_select(0, s.positions[k]).contiguous();
    fs[k] = agent_.rpc_async<PushReply>(rank_of(k), kPushRows, p);
  }
  for (int k = 0; k < opt_.shards; ++k)
    note_round(k, await(k, fs[k], [&] { return agent_.rpc_async<PushReply>(rank_of(k), kPushRows, ps[k]); }).round);
}

PushId PsClient::next_push_id() { return PushId{opt_.trainer, agent_.incarnation(), ++pushes_}; }

void PsClient::note_round(int k, std::int64_t round) {
  // A restarted shard went back to its snapshot's round: follow it down once.
  rounds_[k] = restarted_[k] ? round : std::max(rounds_[k], round);
  restarted_[k] = 0;
}

std::vector<ShardStats> PsClient::stats() {
  std::vector<ShardStats> out;
  for (int k = 0; k < opt_.shards; ++k) out.push_back(agent_.rpc_sync<ShardStats>(rank_of(k), kStats));
  return out;
}

void PsClient::bye() {
  try {  // a shard restarted later reads this: the trainer is not waited for
    agent_.store().set(done_key(opt_.trainer), "1");
  } catch (const std::exception&) {}
  for (int k = 0; k < opt_.shards; ++k) {
    try {
      agent_.rpc_sync<bool>(rank_of(k), kBye, opt_.trainer);
    } catch (const std::exception&) {}
  }
}

}  // namespace distrl::training::ps
