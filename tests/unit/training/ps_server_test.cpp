// One parameter-server shard, called directly (no RPC): the server optimizers against
// LibTorch's, sync rounds (quorum, max_wait, late pushes dropped or folded, departures), async,
// the SSP staleness bound, sparse rows and every refused request.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "common/error.h"
#include "tests/support/tolerance.h"
#include "tests/support/errors.h"
#include "training/ps/server.h"

namespace distrl::training::ps {
namespace {

using namespace std::chrono_literals;
using Mode = ServerOptions::Mode;
using distrl::testing::error_of;

ServerOptions options(Mode mode, std::string opt = "sgd") {
  ServerOptions o;
  o.mode = mode;
  o.optimizer.kind = std::move(opt);
  o.optimizer.lr = 0.1;
  o.optimizer.momentum = 0.9;
  return o;
}

DeclareRequest dense(const std::string& name, at::Tensor v) { return DeclareRequest{name, v, false, 0}; }

// A fresh push id for trainer (sequence numbers only have to grow).
PushId next_id(int trainer) {
  static std::atomic<std::int64_t> seq{0};
  return PushId{trainer, 1, ++seq};
}

PushRequest push_of(int trainer, std::int64_t round, const std::string& name, at::Tensor g) {
  PushRequest p;
  p.id = next_id(trainer);
  p.round = round;
  p.names = {name};
  p.grads = {g};
  return p;
}

RowsPush rows_push_of(const std::string& table, at::Tensor rows, at::Tensor grads) {
  RowsPush p;
  p.id = next_id(0);
  p.table = table;
  p.rows = std::move(rows);
  p.grads = std::move(grads);
  return p;
}

at::Tensor value_of(ShardServer& s, const std::string& name) { return s.pull(PullRequest{{name}}).values.at(0); }

// LibTorch's own optimizer `kind` (as options() sets the server's: lr 0.1, SGD with momentum
// 0.9) from w0 through one step per gradient, in w0's dtype.
at::Tensor libtorch_steps(const std::string& kind, const at::Tensor& w0, const std::vector<at::Tensor>& grads) {
  at::Tensor w = w0.clone().requires_grad_(true);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (kind == "sgd")
    opt = std::make_unique<torch::optim::SGD>(std::vector<at::Tensor>{w}, torch::optim::SGDOptions(0.1).momentum(0.9));
  if (kind == "adagrad")
    opt = std::make_unique<torch::optim::Adagrad>(std::vector<at::Tensor>{w}, torch::optim::AdagradOptions(0.1));
  if (kind == "adam")
    opt = std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{w}, torch::optim::AdamOptions(0.1));
  for (const at::Tensor& g : grads) {
    w.mutable_grad() = g.to(w0.scalar_type());
    opt->step();
  }
  return w.detach();
}

// The server's formulas evaluate the same arithmetic as LibTorch's in another order. What
// float32 rounding changes in that arithmetic is measured here (tests/support/tolerance.h): the
// orders are LibTorch in float32 and LibTorch in float64 (all but exact), and the server, in
// float32, must land within their spread.
distrl::testing::Reorderings libtorch_orders(const std::string& kind, const at::Tensor& w0,
                                             const std::vector<at::Tensor>& grads) {
  distrl::testing::Reorderings want(kind);
  want.add({libtorch_steps(kind, w0, grads)});
  want.add({libtorch_steps(kind, w0.to(at::kDouble), grads).to(at::kFloat)});
  return want;
}

// The server's optimizers step as LibTorch's on the same gradients.
TEST(PsServerTest, OptimizersMatchLibTorch) {
  for (const std::string kind : {"sgd", "adagrad", "adam"}) {
    ServerOptions o = options(Mode::Async, kind);
    ShardServer s(0, 1, 1, 1, o);
    torch::manual_seed(3);
    at::Tensor w0 = torch::randn({4, 3});
    s.declare(dense("w", w0));
    std::vector<at::Tensor> grads;
    for (int i = 0; i < 5; ++i) {
      grads.push_back(torch::randn({4, 3}));
      s.push(push_of(0, 0, "w", grads.back())).value();
    }
    EXPECT_EQ(libtorch_orders(kind, w0, grads).check({value_of(s, "w")}), "");
  }
}

// Rows of a table follow the same rules: a row's Adam/Adagrad steps count its own updates, so a
// table stepped through rows equals the dense step for the rows that were touched (each path
// one more order of LibTorch's arithmetic).
TEST(PsServerTest, TableRowsStepLikeDenseRowsAndUntouchedRowsStay) {
  for (const std::string kind : {"sgd", "adagrad", "adam"}) {
    ShardServer s(0, 1, 1, 1, options(Mode::Async, kind));
    ShardServer d(0, 1, 1, 1, options(Mode::Async, kind));
    at::Tensor t0 = torch::randn({6, 2});
    const at::Tensor rows0 = t0.index_select(0, torch::tensor({1, 4}));
    s.declare(DeclareRequest{"emb", t0, true, 6});
    d.declare(dense("rows", rows0));
    std::vector<at::Tensor> grads;  // of rows 1 and 4
    for (int i = 0; i < 3; ++i) {
      at::Tensor g = torch::randn({2, 2});
      s.push_rows(rows_push_of("emb", torch::tensor({4, 1}), g)).value();
      grads.push_back(g.index_select(0, torch::tensor({1, 0})));
      d.push(push_of(0, 0, "rows", grads.back())).value();
    }
    at::Tensor rows = s.pull_rows(RowsRequest{"emb", torch::tensor({1, 4, 0})});
    const auto want = libtorch_orders(kind, rows0, grads);
    EXPECT_EQ(want.check({rows.slice(0, 0, 2)}), "") << "table rows";
    EXPECT_EQ(want.check({value_of(d, "rows")}), "") << "dense";
    EXPECT_TRUE(torch::equal(rows[2], t0[0])) << kind;
  }
}

// A row named twice in one asynchronous push gets both gradients, summed and stepped once, as in
// a sync round and as PyTorch coalesces a sparse gradient (a gather-then-scatter update would
// keep one of them; stepping it twice would count two steps). SGD with momentum 0.9 from zero.
TEST(PsServerTest, ARowNamedTwiceInOnePushGetsBothGradientsSummed) {
  ShardServer s(0, 1, 1, 1, options(Mode::Async, "sgd"));
  const at::Tensor t0 = torch::randn({3, 2});
  s.declare(DeclareRequest{"emb", t0, true, 3});
  const at::Tensor g = torch::randn({3, 2});
  s.push_rows(rows_push_of("emb", torch::tensor({2, 1, 2}), g)).value();
  const at::Tensor got = s.pull_rows(RowsRequest{"emb", torch::tensor({2, 1, 0})});
  EXPECT_TRUE(torch::allclose(got[0], t0[2] - 0.1 * (g[0] + g[2]), 1e-6, 1e-6)) << got[0] << t0[2];
  EXPECT_TRUE(torch::allclose(got[1], t0[1] - 0.1 * g[1], 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(got[2], t0[0])) << "an untouched row stays";
  s.push_rows(rows_push_of("emb", torch::tensor({0, 1}), torch::ones({2, 2})))
      .value();  // no repeats: the bitmap was cleared
  const at::Tensor again = s.pull_rows(RowsRequest{"emb", torch::tensor({0})});
  EXPECT_TRUE(torch::allclose(again[0], t0[0] - 0.1, 1e-6, 1e-6));
}

// A snapshot holds values, optimizer state (Adam's moments and per-row steps), the round and the
// clocks: a shard restored from it equals the one that wrote it, and both step identically on.
TEST(PsServerTest, ARestoredSnapshotEqualsTheShardAndStepsLikeIt) {
  const std::string dir = ::testing::TempDir() + "/ps_snapshot_" + std::to_string(::getpid());
  ServerOptions o = options(Mode::Sync, "adam");
  o.snapshot_path = dir + "/shard0.pt";
  ShardServer a(0, 1, 2, 1, o);
  torch::manual_seed(5);
  a.declare(dense("w", torch::randn({3, 2})));
  a.declare(DeclareRequest{"emb", torch::randn({5, 2}), true, 5});
  const std::int64_t now = 1 << 20;              // never a closed round: no push is late
  auto rounds = [&](ShardServer& s, int seed) {  // a round of dense pushes, then one of rows
    torch::manual_seed(seed);
    std::vector<transport::Future<PushReply>> fs;
    for (int t = 0; t < 2; ++t) fs.push_back(s.push(push_of(t, now, "w", torch::randn({3, 2}))));
    for (int t = 0; t < 2; ++t) {
      RowsPush p;
      p.id = next_id(t);
      p.round = now;
      p.table = "emb";
      p.rows = torch::tensor({t, 3});
      p.grads = torch::randn({2, 2});
      fs.push_back(s.push_rows(p));
    }
    for (auto& f : fs) ASSERT_TRUE(f.wait_for(5s));
  };
  for (int r = 0; r < 3; ++r) rounds(a, r);
  a.snapshot();
  EXPECT_TRUE(std::filesystem::exists(o.snapshot_path));
  EXPECT_FALSE(std::filesystem::exists(o.snapshot_path + ".tmp"));

  ServerOptions ob = o;
  ob.snapshot_path.clear();
  ShardServer b(0, 1, 2, 1, ob);
  EXPECT_EQ(b.restore(o.snapshot_path), a.stats().rounds);
  EXPECT_TRUE(torch::equal(value_of(a, "w"), value_of(b, "w")));
  const at::Tensor all = torch::arange(5);
  EXPECT_TRUE(torch::equal(a.pull_rows(RowsRequest{"emb", all}), b.pull_rows(RowsRequest{"emb", all})));
  EXPECT_EQ(b.stats().restored_round, 6);
  rounds(a, 7);
  rounds(b, 7);  // the same gradients: Adam's moments and step counts came back too
  // The same operations on the same saved bits, in one process: equal but for kernels that pick
  // their path by the tensors' alignment (MKL), a few ulps.
  distrl::testing::Reorderings same("restored shard");
  same.add({value_of(a, "w"), a.pull_rows(RowsRequest{"emb", all})});
  EXPECT_EQ(same.check({value_of(b, "w"), b.pull_rows(RowsRequest{"emb", all})}), "");

  ShardServer wrong(0, 1, 3, 1, ob);  // a snapshot of another world is refused by name
  try {
    wrong.restore(o.snapshot_path);
    ADD_FAILURE() << "a snapshot of 2 trainers restored into 3";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trainers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.restore(dir + "/missing.pt"), Error);
  std::filesystem::remove_all(dir);
}

// A shard's snapshot file, written as ShardServer::snapshot writes one, with one key whose parts
// the test chooses (absent parts undefined): a damaged file to restore from.
struct SnapshotKey {
  std::string name = "emb";
  bool table = true;
  std::int64_t global_rows = 5;
  at::Tensor value = torch::zeros({5, 2}), m1, m2, steps;
};

void write_snapshot_file(const std::string& path, const SnapshotKey& k) {
  torch::serialize::OutputArchive ar;
  ar.write("shard", c10::IValue(std::int64_t{0}));
  ar.write("shards", c10::IValue(std::int64_t{1}));
  ar.write("round", c10::IValue(std::int64_t{3}));
  ar.write("progress", c10::IValue(std::int64_t{3}));
  ar.write("clocks", torch::zeros({2}, at::kLong), true);
  ar.write("last_push", torch::zeros({2, 3}, at::kLong), true);
  ar.write("keys", c10::IValue(std::int64_t{1}));
  torch::serialize::OutputArchive a;
  a.write("name", c10::IValue(k.name));
  a.write("table", c10::IValue(k.table));
  a.write("global_rows", c10::IValue(k.global_rows));
  a.write("value", k.value, true);
  if (k.m1.defined()) a.write("m1", k.m1, true);
  if (k.m2.defined()) a.write("m2", k.m2, true);
  if (k.steps.defined()) a.write("steps", k.steps, true);
  ar.write("key0", a);
  ar.save_to(path);
}

// The optimizer steps a table's rows through raw pointers, so a snapshot whose state does not
// fit its value must be refused before any of it is used, naming the key, and the shard must
// keep what it had; a file that is not a whole snapshot is refused as unreadable.
TEST(PsServerTest, ADamagedSnapshotIsRefusedByNameAndTheShardKeepsWhatItHad) {
  const std::string dir = ::testing::TempDir() + "/ps_damaged_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ServerOptions o = options(Mode::Async, "adam");
  ShardServer s(0, 1, 2, 1, o);
  const at::Tensor emb = torch::randn({5, 2});
  s.declare(DeclareRequest{"emb", emb, true, 5});
  const at::Tensor all = torch::arange(5);

  struct Case {
    const char* what;
    SnapshotKey key;
    const char* says;
  };
  SnapshotKey good;  // Adam's state ten steps in, so that a step shows whether it was used
  good.m1 = torch::full({5, 2}, 0.5f);
  good.m2 = torch::full({5, 2}, 0.25f);
  good.steps = torch::full({5}, 10.0, at::kDouble);
  std::vector<Case> cases;
  cases.push_back({"a moment with a row less", good, "optimizer state of another shape"});
  cases.back().key.m1 = torch::zeros({4, 2});
  cases.push_back({"a moment of another type", good, "optimizer state of another shape or type"});
  cases.back().key.m2 = torch::zeros({5, 2}, at::kDouble);
  cases.push_back({"step counts in float", good, "optimizer state"});
  cases.back().key.steps = torch::zeros({5});
  cases.push_back({"a step count per row missing", good, "optimizer state"});
  cases.back().key.steps = torch::zeros({4}, at::kDouble);
  cases.push_back({"a table of one dimension", good, "optimizer state"});
  cases.back().key.value = torch::zeros({10});
  cases.back().key.m1 = cases.back().key.m2 = at::Tensor();
  cases.push_back({"a table of integers", good, "optimizer state"});
  cases.back().key.value = torch::zeros({5, 2}, at::kLong);
  cases.back().key.m1 = cases.back().key.m2 = at::Tensor();
  cases.push_back({"more rows than its share of the table", good, "global rows this shard holds"});
  cases.back().key.global_rows = 4;
  cases.push_back({"fewer rows than its share of the table", good, "global rows this shard holds"});
  cases.back().key.global_rows = 9;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir + "/damaged.pt";
    write_snapshot_file(path, c.key);
    const std::string err = error_of([&] { s.restore(path); });
    EXPECT_NE(err.find("snapshot " + path), std::string::npos) << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
    EXPECT_NE(err.find("'emb'"), std::string::npos) << err;
    EXPECT_TRUE(torch::equal(s.pull_rows(RowsRequest{"emb", all}), emb)) << "the shard changed";
    EXPECT_EQ(s.stats().restored_round, -1) << "the shard took the snapshot's round (-1: never restored)";
  }

  // Not a whole snapshot: cut short, or not an archive at all.
  const std::string path = dir + "/whole.pt";
  write_snapshot_file(path, good);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::string& damaged : {bytes.substr(0, bytes.size() / 2), std::string("not a snapshot\n")}) {
    const std::string cut = dir + "/cut.pt";
    std::ofstream(cut, std::ios::binary) << damaged;
    const std::string err = error_of([&] { s.restore(cut); });
    EXPECT_NE(err.find("cannot be read"), std::string::npos) << err;
    EXPECT_TRUE(torch::equal(s.pull_rows(RowsRequest{"emb", all}), emb)) << "the shard changed";
  }
  // The whole one restores, and its state is used: Adam's 11th step from its moments.
  EXPECT_EQ(s.restore(path), 3);
  EXPECT_TRUE(torch::equal(s.pull_rows(RowsRequest{"emb", all}), torch::zeros({5, 2})));
  s.push_rows(rows_push_of("emb", torch::tensor({1}), torch::ones({1, 2}))).value();
  const double m = 0.5 * 0.9 + 0.1, v = 0.25 * 0.999 + 0.001, t = 11;
  const double want = -0.1 / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
  const at::Tensor got = s.pull_rows(RowsRequest{"emb", torch::tensor({1})});
  EXPECT_NEAR(got[0][0].item<float>(), want, 1e-5) << "zero moments would give -0.1";
  EXPECT_NEAR(got[0][1].item<float>(), want, 1e-5);
  std::filesystem::remove_all(dir);
}

TEST(PsServerTest, SyncRoundAveragesAtQuorumAndAnswersEveryPushWithTheNewValues) {
  ServerOptions o = options(Mode::Sync);
  o.optimizer.momentum = 0;
  ShardServer s(0, 1, 3, 1, o);
  s.declare(dense("w", torch::zeros({2})));
  auto f0 = s.push(push_of(0, 0, "w", torch::tensor({1.0f, 2.0f})));
  auto f1 = s.push(push_of(1, 0, "w", torch::tensor({3.0f, 4.0f})));
  EXPECT_FALSE(f0.done());
  auto f2 = s.push(push_of(2, 0, "w", torch::tensor({5.0f, 6.0f})));
  for (auto* f : {&f0, &f1, &f2}) {
    ASSERT_TRUE(f->wait_for(5s));
    PushReply r = f->value();
    EXPECT_EQ(r.round, 1);
    EXPECT_TRUE(torch::allclose(r.values.at(0), torch::tensor({-0.3f, -0.4f})));  // -lr * mean
  }
  EXPECT_EQ(s.stats().closed_quorum, 1);
}

TEST(PsServerTest, QuorumAndMaxWaitCloseARoundWithoutTheSlowTrainer) {
  ServerOptions o = options(Mode::Sync);
  o.quorum = 2;
  ShardServer s(0, 1, 3, 1, o);
  s.declare(dense("w", torch::zeros({1})));
  auto f0 = s.push(push_of(0, 0, "w", torch::ones({1})));
  auto f1 = s.push(push_of(1, 0, "w", torch::ones({1})));
  ASSERT_TRUE(f0.wait_for(5s));  // 2 of 3: closed without trainer 2
  // Trainer 2 pushes for round 0, which closed: late, dropped, answered at once.
  PushReply late = s.push(push_of(2, 0, "w", torch::ones({1}) * 100)).value();
  EXPECT_TRUE(late.dropped);
  EXPECT_EQ(late.round, 1);
  EXPECT_EQ(s.stats().trainers.at(2).late, 1);

  ServerOptions w = options(Mode::Sync);
  w.max_wait = 50ms;
  ShardServer t(0, 1, 3, 1, w);
  t.declare(dense("w", torch::zeros({1})));
  const auto start = std::chrono::steady_clock::now();
  auto only = t.push(push_of(0, 0, "w", torch::ones({1})));
  ASSERT_TRUE(only.wait_for(5s));  // nobody else came: max_wait closes it
  EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  EXPECT_EQ(t.stats().closed_timeout, 1);
}

TEST(PsServerTest, FoldedLatePushJoinsTheOpenRound) {
  ServerOptions o = options(Mode::Sync);
  o.quorum = 1;
  o.fold_late = true;
  o.optimizer.momentum = 0;
  ShardServer s(0, 1, 2, 1, o);
  s.declare(dense("w", torch::zeros({1})));
  s.push(push_of(0, 0, "w", torch::ones({1}))).value();                    // round 1 closes (quorum 1)
  PushReply r = s.push(push_of(1, 0, "w", torch::ones({1}) * 3)).value();  // late: folded into round 2
  EXPECT_FALSE(r.dropped);
  EXPECT_EQ(r.round, 2);
  EXPECT_TRUE(torch::allclose(value_of(s, "w"), torch::tensor({-0.4f})));
}

TEST(PsServerTest, ADepartingTrainerLeavesTheQuorumAndTheRoundCloses) {
  ShardServer s(0, 1, 2, 1, options(Mode::Sync));
  s.declare(dense("w", torch::zeros({1})));
  auto f0 = s.push(push_of(0, 0, "w", torch::ones({1})));
  EXPECT_FALSE(f0.wait_for(20ms));
  s.bye(1);
  ASSERT_TRUE(f0.wait_for(5s));
  EXPECT_EQ(s.stats().closed_departure, 1);
  EXPECT_TRUE(s.stats().trainers.at(1).gone);
}

// SSP: with 3 trainers and bound s, the fastest is held while it is more than s pushes ahead of
// the slowest; the measured staleness never exceeds s.
TEST(PsServerTest, SspHoldsTheFastestTrainerWithinTheBound) {
  ServerOptions o = options(Mode::Ssp);
  o.staleness = 2;
  ShardServer s(0, 1, 3, 1, o);
  s.declare(dense("w", torch::zeros({1})));
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  std::atomic<int> slow_pushes{0};
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 30 && !stop; ++i) {
        if (t == 2) {
          std::this_thread::sleep_for(5ms);
          ++slow_pushes;
        }
        s.push(push_of(t, 0, "w", torch::ones({1}))).value();
      }
      if (t != 2) return;
      s.bye(2);
    });
  for (auto& t : ts) t.join();
  const ShardStats st = s.stats();
  for (const auto& t : st.trainers) EXPECT_LE(t.max_staleness, 2) << "trainer " << t.trainer;
  EXPECT_EQ(st.trainers.at(0).pushes, 30);
  EXPECT_GE(st.trainers.at(0).max_staleness, 1);  // the bound was actually reached
}

TEST(PsServerTest, RefusesBadKeysRowsAndShapesByName) {
  ShardServer s(1, 2, 2, 2, options(Mode::Async));
  s.declare(dense("w", torch::zeros({2, 2})));
  s.declare(DeclareRequest{"emb", torch::zeros({3, 4}), true, 6});  // global rows 1, 3, 5
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { s.pull(PullRequest{{"nope"}}); }).find("'nope', which is not declared"), std::string::npos);
  EXPECT_NE(message([&] { s.push(push_of(0, 0, "w", torch::zeros({3}))); }).find("gradient pushed for 'w'"),
            std::string::npos);
  EXPECT_NE(message([&] { s.push(push_of(7, 0, "w", torch::zeros({2, 2}))); }).find("trainer id 7"), std::string::npos);
  EXPECT_NE(message([&] { s.declare(dense("w", torch::zeros({5}))); }).find("key 'w' is declared as"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.pull_rows(RowsRequest{"emb", torch::tensor({0, 3})});
            }).find("row 7 of table 'emb' is out of range [0, 6)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.pull_rows(RowsRequest{"emb", torch::tensor({-1})});
            }).find("out of range"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.pull_rows(RowsRequest{"emb", torch::tensor({0.5})});
            }).find("int64 vector"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.pull_rows(RowsRequest{"w", torch::tensor({0})});
            }).find("dense key, not a table"),
            std::string::npos);
  EXPECT_NE(message([&] {
              s.declare(DeclareRequest{"emb2", torch::zeros({3, 4}), true, 5});
            }).find("table 'emb2' of 5 global rows must be [2, dim] on shard 1 of 2"),
            std::string::npos);
  RowsPush bad;
  bad.id = next_id(0);
  bad.table = "emb";
  bad.rows = torch::tensor({0, 1});
  bad.grads = torch::zeros({2, 5});
  EXPECT_NE(message([&] { s.push_rows(bad); }).find("gradient rows pushed for table 'emb'"), std::string::npos);
  // Duplicate rows: both gradients count (summed), absent rows are untouched.
  RowsPush dup;
  dup.id = next_id(0);
  dup.table = "emb";
  dup.rows = torch::tensor({2, 2});
  dup.grads = torch::ones({2, 4});
  ServerOptions plain = options(Mode::Sync);
  plain.optimizer.momentum = 0;
  ShardServer t(0, 1, 1, 1, plain);
  t.declare(DeclareRequest{"emb", torch::zeros({3, 4}), true, 3});
  t.push_rows(dup).value();
  at::Tensor v = t.pull_rows(RowsRequest{"emb", torch::tensor({2, 0})});
  EXPECT_TRUE(torch::allclose(v[0], torch::full({4}, -0.2f)));  // lr 0.1 * (1 + 1)
  EXPECT_TRUE(torch::equal(v[1], torch::zeros({4})));
  const ShardStats st = t.stats();
  ASSERT_EQ(st.keys.size(), 1u);
  EXPECT_EQ(st.keys[0].hot_rows, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(st.keys[0].hot_row_pushes, (std::vector<std::int64_t>{2}));
}

// ---------------------------------------------------------------- exactly once (protocol.h, PushId)

ServerOptions plain_sgd(Mode mode, double lr = 0.1) {
  ServerOptions o = options(mode);
  o.optimizer.momentum = 0;
  o.optimizer.lr = lr;
  return o;
}

// A push that arrives twice (a retry to a live shard) moves the parameters once: async answers
// the copy with the first outcome and the current values; an older or a replaced process's
// push is refused.
TEST(PsExactlyOnceTest, AsyncAppliesARetriedPushOnce) {
  ShardServer s(0, 1, 1, 1, plain_sgd(Mode::Async));
  s.declare(dense("w", torch::zeros({2})));
  PushRequest p = push_of(0, 0, "w", torch::tensor({1.0f, 2.0f}));
  const PushReply first = s.push(p).value();
  const PushReply again = s.push(p).value();
  EXPECT_FALSE(first.duplicate);
  EXPECT_TRUE(again.duplicate);
  EXPECT_TRUE(torch::allclose(value_of(s, "w"), torch::tensor({-0.1f, -0.2f})));  // -lr * g, once
  EXPECT_TRUE(torch::equal(again.values.at(0), first.values.at(0)));
  EXPECT_EQ(first.clock, 1);
  EXPECT_EQ(again.clock, first.clock);
  EXPECT_EQ(again.round, 0);  // rounds are sync's
  const TrainerStats st = s.stats().trainers.at(0);
  EXPECT_EQ(st.pushes, 1);
  EXPECT_EQ(st.duplicates, 1);

  PushRequest newer = push_of(0, 0, "w", torch::tensor({1.0f, 1.0f}));
  s.push(newer).value();
  EXPECT_NE(error_of([&] { s.push(p).value(); }).find("older than its last one"), std::string::npos);
  PushRequest restarted = push_of(0, 0, "w", torch::tensor({0.0f, 0.0f}));
  restarted.id.incarnation = 2;
  s.push(restarted).value();
  EXPECT_NE(error_of([&] { s.push(newer).value(); }).find("replaced by incarnation 2"), std::string::npos);
  PushRequest unnumbered = push_of(0, 0, "w", torch::zeros({2}));
  unnumbered.id.seq = 0;
  EXPECT_NE(error_of([&] { s.push(unnumbered); }).find("count from 1"), std::string::npos);
  EXPECT_TRUE(torch::allclose(value_of(s, "w"), torch::tensor({-0.2f, -0.3f})));
}

// Sync: a copy that arrives while its round is open waits with the first and adds nothing to
// the sum (the pusher counted once, its gradient once); one that arrives after the round closed
// is answered at once, not late, not applied. A dropped late push's copy is dropped again.
TEST(PsExactlyOnceTest, SyncCountsARetriedPushOnceInItsRound) {
  ShardServer s(0, 1, 2, 1, plain_sgd(Mode::Sync));
  s.declare(dense("w", torch::zeros({1})));
  PushRequest p0 = push_of(0, 0, "w", torch::tensor({1.0f}));
  auto a = s.push(p0), b = s.push(p0);
  EXPECT_FALSE(a.done() || b.done());  // trainer 1 has not pushed: a copy does not make a quorum
  auto c = s.push(push_of(1, 0, "w", torch::tensor({3.0f})));
  for (auto* f : {&a, &b, &c}) {
    ASSERT_TRUE(f->wait_for(5s));
    EXPECT_EQ(f->value().round, 1);
    EXPECT_TRUE(torch::allclose(f->value().values.at(0), torch::tensor({-0.2f})));  // -0.1 * (1 + 3) / 2
  }
  EXPECT_FALSE(a.value().duplicate);
  EXPECT_TRUE(b.value().duplicate);
  const PushReply late_copy = s.push(p0).value();  // after the close: answered at once
  EXPECT_TRUE(late_copy.duplicate);
  EXPECT_FALSE(late_copy.dropped);
  EXPECT_EQ(late_copy.round, 1);
  EXPECT_TRUE(torch::allclose(value_of(s, "w"), torch::tensor({-0.2f})));
  EXPECT_EQ(s.stats().trainers.at(0).late, 0);
  EXPECT_EQ(s.stats().trainers.at(0).duplicates, 2);

  ServerOptions q = plain_sgd(Mode::Sync);
  q.quorum = 1;
  ShardServer t(0, 1, 2, 1, q);
  t.declare(dense("w", torch::zeros({1})));
  t.push(push_of(0, 0, "w", torch::ones({1}))).value();  // round 1 closes with trainer 0 alone
  PushRequest late = push_of(1, 0, "w", torch::ones({1}) * 100);
  EXPECT_TRUE(t.push(late).value().dropped);
  const PushReply again = t.push(late).value();
  EXPECT_TRUE(again.dropped && again.duplicate);
  EXPECT_TRUE(torch::allclose(value_of(t, "w"), torch::tensor({-0.1f})));
}

// A snapshot holds which pushes it contains: an SSP push applied, held (the other trainer is
// behind) and snapshotted, whose answer died with the process, is not applied again when its
// retry reaches the restored shard; the copy is held like the first and reads the values once
// the other trainer has pushed.
TEST(PsExactlyOnceTest, ARestoredShardDoesNotReplayAPushItsSnapshotHolds) {
  const std::string dir = ::testing::TempDir() + "/ps_exactly_once_" + std::to_string(::getpid());
  ServerOptions o = plain_sgd(Mode::Ssp, 1.0);
  o.staleness = 0;
  o.snapshot_path = dir + "/shard0.pt";
  const PushRequest p0 = push_of(0, 0, "w", torch::tensor({1.0f, 0.0f}));
  {
    ShardServer a(0, 1, 2, 1, o);
    a.declare(dense("w", torch::zeros({2})));
    auto held = a.push(p0);
    EXPECT_FALSE(held.wait_for(20ms));  // trainer 1 is at clock 0
    a.snapshot();
  }  // the process "dies": the held answer fails
  ServerOptions ob = o;
  ob.snapshot_path.clear();
  ShardServer b(0, 1, 2, 1, ob);
  b.restore(o.snapshot_path);
  auto retry = b.push(p0);
  EXPECT_FALSE(retry.wait_for(20ms));  // still ahead of trainer 1: held, not applied
  EXPECT_TRUE(torch::allclose(value_of(b, "w"), torch::tensor({-1.0f, 0.0f})));
  const PushReply r1 = b.push(push_of(1, 0, "w", torch::tensor({0.0f, 1.0f}))).value();
  ASSERT_TRUE(retry.wait_for(5s));
  EXPECT_TRUE(retry.value().duplicate);
  EXPECT_TRUE(torch::allclose(retry.value().values.at(0), torch::tensor({-1.0f, -1.0f})));
  EXPECT_TRUE(torch::allclose(r1.values.at(0), torch::tensor({-1.0f, -1.0f})));
  std::filesystem::remove_all(dir);
}

// SSP's read guarantee, checked against its formula rather than the server's counters: 3
// trainers of different speeds each push a one-hot gradient (trainer u: -1 at w[u]); after its
// c-th push a trainer must read every trainer's first c - s pushes (w[u] <= -(c - s)), and all
// of its own (w[t] == -c). Staleness 0 reads like BSP.
TEST(PsExactlyOnceTest, SspReadsHoldEveryTrainersUpdatesThroughClockCMinusS) {
  constexpr int kTrainers = 3, kPushes = 12;
  for (int staleness : {0, 1, 2}) {
    SCOPED_TRACE("staleness " + std::to_string(staleness));
    ServerOptions o = plain_sgd(Mode::Ssp, 1.0);
    o.staleness = staleness;
    ShardServer s(0, 1, kTrainers, 1, o);
    s.declare(dense("w", torch::zeros({kTrainers})));
    std::vector<std::vector<at::Tensor>> read(kTrainers);
    std::vector<std::thread> ts;
    for (int t = 0; t < kTrainers; ++t)
      ts.emplace_back([&, t] {
        for (int c = 1; c <= kPushes; ++c) {
          std::this_thread::sleep_for(std::chrono::microseconds(300 * t * ((c * 7 + t) % 3)));
          read[t].push_back(s.push(push_of(t, 0, "w", torch::one_hot(torch::tensor(t), kTrainers).to(torch::kFloat)))
                                .value()
                                .values.at(0));
        }
      });
    for (auto& t : ts) t.join();
    for (int t = 0; t < kTrainers; ++t)
      for (int c = 1; c <= kPushes; ++c) {
        const at::Tensor& v = read[t][c - 1];
        EXPECT_EQ(v[t].item<float>(), -c) << "trainer " << t << " at clock " << c << " reads its own pushes";
        for (int u = 0; u < kTrainers; ++u)
          EXPECT_LE(v[u].item<float>(), -(c - staleness)) << "trainer " << t << " at clock " << c << " read "
                                                          << -v[u].item<float>() << " push(es) of trainer " << u;
      }
  }
}

// One averaging rule for dense keys and table rows: the round's sum over how many pushes the
// round holds; a trainer whose push carried nothing for a row (or key) counts as a zero.
TEST(PsExactlyOnceTest, ARoundAveragesEveryKeyAndRowOverItsPushes) {
  ShardServer s(0, 1, 2, 1, plain_sgd(Mode::Sync));
  s.declare(dense("w", torch::zeros({1})));
  s.declare(DeclareRequest{"emb", torch::zeros({3, 2}), true, 3});
  RowsPush rows;
  rows.id = next_id(0);
  rows.table = "emb";
  rows.rows = torch::tensor({1});
  rows.grads = torch::full({1, 2}, 2.0f);
  RowsPush tick = rows;  // trainer 1 touches no row of this shard
  tick.id = next_id(1);
  tick.rows = torch::zeros({0}, torch::kLong);
  tick.grads = torch::zeros({0, 2});
  auto a = s.push_rows(rows), b = s.push_rows(tick);
  ASSERT_TRUE(a.wait_for(5s) && b.wait_for(5s));
  EXPECT_TRUE(torch::allclose(s.pull_rows(RowsRequest{"emb", torch::tensor({1, 0})}),
                              torch::tensor({{-0.1f, -0.1f}, {0.0f, 0.0f}})));  // -0.1 * 2 / 2
  PushRequest only = push_of(0, 1, "w", torch::tensor({4.0f}));
  PushRequest none;
  none.id = next_id(1);
  none.round = 1;
  auto c = s.push(only), d = s.push(none);
  ASSERT_TRUE(c.wait_for(5s) && d.wait_for(5s));
  EXPECT_TRUE(torch::allclose(value_of(s, "w"), torch::tensor({-0.2f})));  // -0.1 * 4 / 2
}

// Sync over two shards with a quorum of 2 of 3 trainers whose pushes reach the shards in
// different orders: shard 1 follows shard 0's decisions, so both shards' round k hold the same
// pushes. Checked against the rounds as the trainers saw them: w = -sum over rounds of the
// mean of the round's gradients, on both shards.
TEST(PsExactlyOnceTest, TwoShardsCloseEveryRoundWithTheSamePushes) {
  constexpr int kTrainers = 3, kRounds = 40;
  ServerOptions o = plain_sgd(Mode::Sync, 1.0);
  o.quorum = 2;
  ShardServer leader(0, 2, kTrainers, 2, o), follower(1, 2, kTrainers, 2, o);
  leader.set_decision_sink([&](int shard, const Decision& d) {
    EXPECT_EQ(shard, 1);
    follower.decide(d);
    return transport::Future<bool>::ready(true);
  });
  leader.declare(dense("a", torch::zeros({1})));
  follower.declare(dense("b", torch::zeros({1})));
  struct Seen {
    std::int64_t round;
    bool dropped;
    float grad;
  };
  std::vector<std::vector<Seen>> seen(kTrainers);
  std::vector<std::thread> ts;
  for (int t = 0; t < kTrainers; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 gen(static_cast<unsigned>(t + 1));
      std::int64_t round = 0;
      for (int i = 0; i < kRounds; ++i) {
        const float g = static_cast<float>((t + 1) * 100 + i);  // integers: sums are exact
        PushRequest pa = push_of(t, round, "a", torch::full({1}, g)), pb = pa;
        pb.names = {"b"};
        const bool leader_first = gen() % 2 == 0;
        auto pause = [&] { std::this_thread::sleep_for(std::chrono::microseconds(gen() % 400)); };
        transport::Future<PushReply> fa, fb;
        if (leader_first) {
          fa = leader.push(pa);
          pause();
          fb = follower.push(pb);
        } else {
          fb = follower.push(pb);
          pause();
          fa = leader.push(pa);
        }
        const PushReply ra = fa.value(), rb = fb.value();
        EXPECT_EQ(ra.dropped, rb.dropped) << "trainer " << t << " push " << i;
        round = ra.round;
        seen[t].push_back(Seen{ra.round, ra.dropped, g});
      }
      leader.bye(t);
      follower.bye(t);
    });
  for (auto& t : ts) t.join();
  std::map<std::int64_t, std::vector<float>> rounds;  // as the trainers' answers tell it
  for (const auto& pushes : seen)
    for (const auto& p : pushes)
      if (!p.dropped) rounds[p.round].push_back(p.grad);
  double expected = 0;
  for (const auto& [round, grads] : rounds) {
    double sum = 0;
    for (float g : grads) sum += g;
    expected -= sum / static_cast<double>(grads.size());
  }
  const double a = value_of(leader, "a").item<double>(), b = value_of(follower, "b").item<double>();
  EXPECT_NEAR(a, expected, 1e-3 * std::abs(expected));
  EXPECT_EQ(a, b) << "the shards applied different rounds";
  const ShardStats sa = leader.stats(), sb = follower.stats();
  EXPECT_EQ(sa.rounds, sb.rounds);
  EXPECT_EQ(sa.rounds, static_cast<std::int64_t>(rounds.size()));
  for (int t = 0; t < kTrainers; ++t) EXPECT_EQ(sa.trainers[t].late, sb.trainers[t].late) << "trainer " << t;
}

// ps.decide and ps.follow are reachable by any peer: a malformed decision, one sent to a shard
// that does not follow, and a follow asked of a shard that does not lead are refused by name.
TEST(PsExactlyOnceTest, MalformedDecisionsAndMisdirectedRoundCallsAreRefused) {
  ServerOptions o = plain_sgd(Mode::Sync);
  ShardServer leader(0, 2, 2, 2, o), follower(1, 2, 2, 2, o), single(0, 1, 2, 2, o);
  auto refused = [](const std::function<void()>& fn, const std::string& words) {
    const std::string e = error_of(fn);
    EXPECT_NE(e.find(words), std::string::npos) << e;
  };
  Decision good{1, 1, 1, Decision::Quorum, {PushId{0, 1, 1}}};
  Decision bad = good;
  bad.kind = 7;
  refused([&] { follower.decide(bad); }, "malformed");
  bad = good;
  bad.pushes.clear();
  refused([&] { follower.decide(bad); }, "malformed");
  bad = good;
  bad.round = 0;
  refused([&] { follower.decide(bad); }, "malformed");
  bad = good;
  bad.pushes = {PushId{5, 1, 1}};
  refused([&] { follower.decide(bad); }, "trainer id 5 is out of range");
  bad.pushes = std::vector<PushId>(5, PushId{0, 1, 1});
  refused([&] { follower.decide(bad); }, "malformed");
  bad.pushes = {PushId{0, 1, 1}, PushId{1, 1, 1}, PushId{0, 1, 1}};
  refused([&] { follower.decide(bad); }, "names push 1 of trainer 0 twice");
  refused([&] { leader.decide(good); }, "not a sync follower");
  refused([&] { single.decide(good); }, "not a sync follower");
  refused([&] { follower.follow(1, 0); }, "not the leader");
  EXPECT_TRUE(follower.decide(good));  // a well-formed one waits for its push
  EXPECT_EQ(follower.stats().rounds, 0);
  EXPECT_EQ(leader.follow(1, 0).decided.size(), 2u);
}

// A follower that missed decisions (sent while it could not be reached, so the leader answered
// its own pushes without it) asks the leader where its rounds stand (ps.follow -- the timer does
// it for a follower stalled 2 s; here by hand): it applies the missed round and answers the push
// the leader dropped meanwhile as dropped.
TEST(PsExactlyOnceTest, AFollowerThatMissedDecisionsCatchesUpFromTheLeader) {
  ServerOptions o = plain_sgd(Mode::Sync, 1.0);
  o.quorum = 1;
  ShardServer leader(0, 2, 2, 2, o), follower(1, 2, 2, 2, o);
  bool deliver = false;
  leader.set_decision_sink([&](int, const Decision& d) {
    if (!deliver) return transport::Future<bool>::failed(std::make_exception_ptr(TransportError("unreachable")));
    follower.decide(d);
    return transport::Future<bool>::ready(true);
  });
  leader.declare(dense("a", torch::zeros({1})));
  follower.declare(dense("b", torch::zeros({1})));
  PushRequest a0 = push_of(0, 0, "a", torch::full({1}, 2.0f)), b0 = a0;
  b0.names = {"b"};
  auto fb0 = follower.push(b0);
  EXPECT_TRUE(leader.push(a0).value().round == 1);  // round 1 closes at the leader, unseen by the follower
  PushRequest a1 = push_of(1, 0, "a", torch::full({1}, 5.0f)), b1 = a1;  // late: round 1 closed without it
  b1.names = {"b"};
  auto fb1 = follower.push(b1);
  EXPECT_TRUE(leader.push(a1).value().dropped);
  EXPECT_FALSE(fb0.wait_for(20ms) || fb1.wait_for(20ms));
  follower.take_follow(leader.follow(1, 0));
  ASSERT_TRUE(fb0.wait_for(5s) && fb1.wait_for(5s));
  EXPECT_FALSE(fb0.value().dropped);
  EXPECT_TRUE(fb1.value().dropped);
  EXPECT_EQ(value_of(follower, "b").item<float>(), -2.0f);
  EXPECT_EQ(value_of(leader, "a").item<float>(), -2.0f);
  deliver = true;  // and on from there as usual
  PushRequest a2 = push_of(1, 1, "a", torch::full({1}, 3.0f)), b2 = a2;
  b2.names = {"b"};
  auto fb2 = follower.push(b2);
  leader.push(a2).value();
  ASSERT_TRUE(fb2.wait_for(5s));
  EXPECT_EQ(value_of(follower, "b").item<float>(), value_of(leader, "a").item<float>());
}

// Issue 45, item 8: a restored leader's round mixes a push the follower applied before the
// restart (in the earlier leader's round 1) with a new one. The follower applies only the new
// push, scaled as the leader scales it (by the 2 pushes its decision names), not by the 1 it
// applies: the new gradient's step is the same on both shards (server.h says why).
TEST(PsExactlyOnceTest, AFollowerReplayingAMixedRoundScalesANewPushAsTheLeaderDoes) {
  ServerOptions o = plain_sgd(Mode::Sync, 1.0);
  ShardServer follower(1, 2, 2, 2, o);
  follower.declare(dense("b", torch::zeros({1})));
  PushRequest p0 = push_of(0, 0, "b", torch::full({1}, 2.0f));
  auto f0 = follower.push(p0);
  follower.decide(Decision{1, 1, 1, Decision::Quorum, {p0.id}});  // leader process 1, round 1: p0 alone
  ASSERT_TRUE(f0.wait_for(5s));
  EXPECT_EQ(value_of(follower, "b").item<float>(), -2.0f);
  // Leader process 2, restored from before its round 1: p0 (retried there) and p1 in its round 1.
  PushRequest p1 = push_of(1, 0, "b", torch::full({1}, 4.0f));
  auto f1 = follower.push(p1);
  follower.decide(Decision{2, 1, 1, Decision::Quorum, {p0.id, p1.id}});
  ASSERT_TRUE(f1.wait_for(5s));
  EXPECT_FALSE(f1.value().dropped);
  // p0 not applied again; p1 at the leader's weight, 4 / 2 (the leader: (2 + 4) / 2 = 3 from its
  // restored value). Scaled by the pushes applied here it would be 4 / 1.
  EXPECT_EQ(value_of(follower, "b").item<float>(), -4.0f);
  EXPECT_EQ(follower.stats().rounds, 2);
}

// A decided push that counted as zero on a follower (its trainer was gone there) and arrives
// after all is answered at once as dropped, not held for a decision that will never come; a
// trainer's pushes waiting on a shard are bounded.
TEST(PsExactlyOnceTest, APushCountedAsZeroThatArrivesLateIsAnsweredAndHeldPushesAreBounded) {
  ServerOptions o = plain_sgd(Mode::Sync, 1.0);
  ShardServer follower(1, 2, 2, 2, o);
  follower.declare(dense("b", torch::zeros({1})));
  PushRequest p0 = push_of(0, 0, "b", torch::full({1}, 2.0f)), p1 = push_of(1, 0, "b", torch::full({1}, 4.0f));
  auto f0 = follower.push(p0);
  follower.bye(1);  // trainer 1 gone here (its connection dropped, say)
  follower.decide(Decision{1, 1, 1, Decision::Quorum, {p0.id, p1.id}});
  ASSERT_TRUE(f0.wait_for(5s));
  EXPECT_EQ(value_of(follower, "b").item<float>(), -1.0f);  // (2 + a zero) / 2
  auto late = follower.push(p1);
  ASSERT_TRUE(late.wait_for(5s)) << "a copy that can no longer join its round must not wait";
  EXPECT_TRUE(late.value().dropped);
  EXPECT_EQ(value_of(follower, "b").item<float>(), -1.0f);

  PushRequest q0 = push_of(0, 1, "b", torch::ones({1}));
  auto held = follower.push(q0);  // waits for a decision
  PushRequest q1 = push_of(0, 1, "b", torch::ones({1}));
  EXPECT_NE(error_of([&] { follower.push(q1); }).find("a client sends one at a time"), std::string::npos);
  for (int inc = 2; inc <= 3; ++inc) {  // later processes of the trainer
    PushRequest r = push_of(0, 1, "b", torch::ones({1}));
    r.id.incarnation = inc;
    follower.push(r);
  }
  PushRequest r4 = push_of(0, 1, "b", torch::ones({1}));
  r4.id.incarnation = 4;
  EXPECT_NE(error_of([&] { follower.push(r4); }).find("3 of its pushes wait here"), std::string::npos);
}

}  // namespace
}  // namespace distrl::training::ps
