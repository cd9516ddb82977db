// DistributedDataParallel with real processes: equivalence with one process on the whole
// batch, several buckets, no_sync accumulation, unused parameters, checkpoint + resume.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <fstream>
#include <functional>

#include "models/nets.h"
#include "tests/support/process_groups.h"
#include "tests/support/tolerance.h"
#include "training/checkpoint.h"
#include "training/data.h"
#include "training/ddp/ddp.h"

namespace {

using distrl::testing::expect;
using distrl::testing::run_group;
using distrl::testing::run_ranks;
using distrl::testing::TempDir;
using namespace distrl;
using transport::ProcessGroup;

std::shared_ptr<transport::ProcessGroup> join(const TempDir& dir, int rank, int world) {
  return distrl::testing::join_group(dir, rank, world);
}

std::shared_ptr<models::Net> make(int seed, const std::vector<int>& hidden = {64, 64}) {
  torch::manual_seed(seed);
  models::NetSpec s;
  s.name = "mlp";
  s.inputs = 10;
  s.outputs = 5;
  s.hidden = hidden;
  return models::make_net(s);
}

double max_diff(models::Net& a, models::Net& b) {
  double d = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) d = std::max(d, (pa[i] - pb[i]).abs().max().item<double>());
  return d;
}

// The one-process reference trained in the summation orders of tests/support/tolerance.h: each
// step on the whole batch, or on its `parts` equal slices accumulated first to last or last to
// first -- as DDP's averaged gradients sum them, in some order. `make_ref` builds the model and
// its optimizer; `batch(k)` gives step k's rows.
using Batch = std::pair<at::Tensor, at::Tensor>;
template <typename MakeRef>
distrl::testing::Reorderings one_process(const std::string& what, MakeRef make_ref, int steps, int parts,
                                         const std::function<Batch(int)>& batch) {
  distrl::testing::Reorderings want(what);
  for (int order = 0; order < distrl::testing::kOrders; ++order) {
    auto [ref, opt] = make_ref();
    for (int k = 0; k < steps; ++k) {
      const auto [x, y] = batch(k);
      opt->zero_grad();
      distrl::testing::backward_in_order(
          order, x, y, distrl::testing::equal_parts(x.size(0), parts),
          [&](const at::Tensor& in) { return ref->forward(in); },
          [](const at::Tensor& out, const at::Tensor& t) { return torch::mse_loss(out, t); });
      opt->step();
    }
    want.add(ref->parameters());
  }
  return want;
}

void expect_within(const distrl::testing::Reorderings& want, const std::vector<at::Tensor>& got) {
  const std::string e = want.check(got);
  expect(e.empty(), e);
}

TEST(DdpTest, TwoRanksOnHalfBatchesEqualOneProcessOnTheWholeBatch) {
  run_group(2, [&](int rank, const std::shared_ptr<ProcessGroup>& pg) {
    auto net = make(100 + rank, {300, 200});  // different inits: DDP must copy rank 0's
    training::DdpOptions o;
    o.bucket_cap_mb = 0.2;  // several buckets, some large enough for the ring
    training::DistributedDataParallel ddp(net, pg, o);
    expect(ddp.buckets().size() >= 3, "expected several buckets, got " + std::to_string(ddp.buckets().size()));
    expect(max_diff(*net, *make(100, {300, 200})) == 0, "parameters broadcast from rank 0");
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto data = training::make_toy(16 * 6, 10, 5, 7);
    auto batch = [&](int k) { return Batch{data.inputs.narrow(0, 16 * k, 16), data.targets.narrow(0, 16 * k, 16)}; };
    for (int k = 0; k < 6; ++k) {
      const auto [x, y] = batch(k);
      auto loss = torch::mse_loss(ddp.forward(x.narrow(0, 8 * rank, 8)), y.narrow(0, 8 * rank, 8));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    auto make_ref = [] {
      auto ref = make(100, {300, 200});  // rank 0's init
      auto opt = std::make_shared<torch::optim::SGD>(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      return std::make_pair(ref, opt);
    };
    expect_within(one_process("parameters after 6 steps", make_ref, 6, 2, batch), net->parameters());
    auto st = ddp.last_stats();
    expect(st.buckets == static_cast<int>(ddp.buckets().size()) && st.comm_s > 0, "stats");
    return 0;
  });
}

TEST(DdpTest, NoSyncAccumulationEqualsOneBigStep) {
  run_group(2, [&](int rank, const std::shared_ptr<ProcessGroup>& pg) {
    auto net = make(5);
    training::DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(net->parameters(), 0.05);
    auto data = training::make_toy(24, 10, 5, 3);  // rank r: rows 12r..12r+11 as 3 micro-batches of 4
    auto local = make(5);                          // the same replica without DDP: what no_sync must leave in .grad
    opt.zero_grad();
    for (int m = 0; m < 3; ++m) {
      auto x = data.inputs.narrow(0, 12 * rank + 4 * m, 4), y = data.targets.narrow(0, 12 * rank + 4 * m, 4);
      auto loss = torch::mse_loss(ddp.forward(x), y) / 3;
      if (m < 2) {
        const auto before = pg->collectives_issued();
        {
          auto guard = ddp.no_sync();
          loss.backward();
        }
        expect(pg->collectives_issued() == before, "no_sync backward communicated");
        (torch::mse_loss(local->forward(x), y) / 3).backward();
        // The same operations in the same process: equal but for kernels that pick their path by
        // the tensors' alignment (MKL), a few ulps (tolerance.h's floor with one order).
        distrl::testing::Reorderings same("no_sync gradients");
        std::vector<at::Tensor> mine, theirs;
        for (const auto& p : local->parameters()) theirs.push_back(p.grad());
        for (const auto& p : net->parameters()) mine.push_back(p.grad());
        same.add(theirs);
        const std::string e = same.check(mine);
        expect(e.empty(), "no_sync gradients are not the local ones: " + e);
      } else {
        const auto before = pg->collectives_issued();
        loss.backward();
        expect(pg->collectives_issued() > before, "the synchronised backward did not communicate");
      }
    }
    opt.step();
    // One step on all 24 rows, or on the 6 micro-batches of 4 (each loss / 6) in either order.
    auto make_ref = [] {
      auto ref = make(5);
      return std::make_pair(ref, std::make_shared<torch::optim::SGD>(ref->parameters(), 0.05));
    };
    expect_within(one_process("parameters after one step", make_ref, 1, 6,
                              [&](int) {
                                return Batch{data.inputs, data.targets};
                              }),
                  net->parameters());
    return 0;
  });
}

// Buckets fill in reverse registration order (the order backward produces gradients); the
// first is capped by first_bucket_cap_mb so communication starts early. MLP 10-300-200-5:
// b2 20 B, w2 4,000 B, b1 800 B, w1 240,000 B, b0 1,200 B, w0 12,000 B.
TEST(DdpTest, BucketsFollowReverseOrderAndTheFirstBucketCap) {
  run_group(1, [&](int, const std::shared_ptr<ProcessGroup>& pg) {
    auto net = make(1, {300, 200});
    training::DdpOptions o;
    o.bucket_cap_mb = 0.25;  // 262,144 B: everything fits in one bucket
    o.first_bucket_cap_mb = 1;
    training::DistributedDataParallel one(net, pg, o);
    expect(one.buckets() == std::vector<std::vector<int>>{{5, 4, 3, 2, 1, 0}}, "one bucket in reverse order");
    o.first_bucket_cap_mb = 0.004;  // 4,194 B: b2 + w2 only
    training::DistributedDataParallel two(net, pg, o);
    expect(two.buckets() == std::vector<std::vector<int>>{{5, 4}, {3, 2, 1, 0}}, "first bucket capped");
    return 0;
  });
}

// A module with buffers: batch-norm statistics diverge on ranks that see different data.
class BatchNormNet : public models::Net {
 public:
  BatchNormNet()
      : fc_(register_module("fc", torch::nn::Linear(10, 8))), bn_(register_module("bn", torch::nn::BatchNorm1d(8))) {}
  torch::Tensor forward(torch::Tensor x) override { return bn_(fc_(x)); }

 private:
  torch::nn::Linear fc_;
  torch::nn::BatchNorm1d bn_;
};

// With broadcast_buffers, every forward starts from rank 0's buffers; without, each rank
// keeps its own (the control that shows the check can fail).
TEST(DdpTest, BroadcastBuffersCopiesRankZerosBuffersBeforeForward) {
  for (bool broadcast : {true, false}) {
    run_group(2, [&](int rank, const std::shared_ptr<ProcessGroup>& pg) {
      torch::manual_seed(3);
      auto net = std::make_shared<BatchNormNet>();
      training::DdpOptions o;
      o.broadcast_buffers = broadcast;
      training::DistributedDataParallel ddp(net, pg, o);
      for (int i = 0; i < 3; ++i) ddp.forward(torch::randn({16, 10}) * (rank + 1) + rank);  // training mode
      net->eval();  // the statistics stop changing; this forward only broadcasts
      ddp.forward(torch::randn({4, 10}));
      for (const auto& b : net->named_buffers()) {
        if (b.value().scalar_type() != torch::kFloat) continue;  // num_batches_tracked agrees anyway
        std::vector<at::Tensor> all{torch::empty_like(b.value()), torch::empty_like(b.value())};
        pg->all_gather(all, b.value().contiguous());
        const bool same = torch::equal(all[0], all[1]);
        expect(same == broadcast, b.key() + (broadcast ? " differs between ranks" : " was broadcast anyway"));
      }
      return 0;
    });
  }
}

// One of two heads is used: its sibling gets no gradient.
class TwoHeads : public models::Net {
 public:
  TwoHeads() : a_(register_module("a", torch::nn::Linear(10, 5))), b_(register_module("b", torch::nn::Linear(10, 5))) {}
  torch::Tensor forward(torch::Tensor x) override { return a_(x); }

 private:
  torch::nn::Linear a_, b_;
};

TEST(DdpTest, UnusedParametersNeedTheOptionAndThenWork) {
  run_group(2, [&](int rank, const std::shared_ptr<ProcessGroup>& pg) {
    auto x = torch::randn({4, 10}), y = torch::randn({4, 5});
    {
      training::DistributedDataParallel ddp(std::make_shared<TwoHeads>(), pg);
      try {
        torch::mse_loss(ddp.forward(x), y).backward();
        return 3;
      } catch (const std::exception& e) {
        const std::string m = e.what();
        expect(m.find("b.weight") != std::string::npos && m.find("find_unused_parameters") != std::string::npos, m);
      }
    }
    training::DdpOptions o;
    o.find_unused_parameters = true;
    auto net = std::make_shared<TwoHeads>();
    training::DistributedDataParallel ddp(net, pg, o);
    for (int i = 0; i < 2; ++i) torch::mse_loss(ddp.forward(x * (rank + 1)), y).backward();
    for (auto& p : net->named_parameters()) {
      expect(p.value().grad().defined(), p.key() + " has a gradient");
      if (p.key()[0] == 'b') expect(p.value().grad().abs().sum().item<double>() == 0, "unused head: zero gradient");
    }
    return 0;
  });
}

// The DDP tutorial's model-parallel ToyMpModel: two halves on two devices (both the CPU here;
// cuda:0 and cuda:1 where they exist), one DDP over both.
class ToyMp : public models::Net {
 public:
  ToyMp(torch::Device d0, torch::Device d1)
      : d0_(d0), d1_(d1), net1_(register_module("net1", torch::nn::Linear(10, 10))),
        net2_(register_module("net2", torch::nn::Linear(10, 5))) {
    net1_->to(d0);
    net2_->to(d1);
  }
  torch::Tensor forward(torch::Tensor x) override { return net2_(torch::relu(net1_(x.to(d0_))).to(d1_)); }

 private:
  torch::Device d0_, d1_;
  torch::nn::Linear net1_, net2_;
};

TEST(DdpTest, ModelSpreadOverTwoDevicesTrainsLikeOneProcess) {
  run_group(2, [&](int rank, const std::shared_ptr<ProcessGroup>& pg) {
    const bool gpus = torch::cuda::device_count() >= 4;
    const torch::Device d0 = gpus ? torch::Device(torch::kCUDA, 2 * rank) : torch::Device(torch::kCPU);
    const torch::Device d1 = gpus ? torch::Device(torch::kCUDA, 2 * rank + 1) : torch::Device(torch::kCPU);
    torch::manual_seed(3);
    auto net = std::make_shared<ToyMp>(d0, d1);
    training::DistributedDataParallel ddp(net, pg);
    torch::optim::SGD opt(net->parameters(), 0.1);
    auto data = training::make_toy(16, 10, 5, 9);
    for (int k = 0; k < 3; ++k) {
      auto loss =
          torch::mse_loss(ddp.forward(data.inputs.narrow(0, 8 * rank, 8)), data.targets.narrow(0, 8 * rank, 8).to(d1));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    auto make_ref = [] {
      torch::manual_seed(3);
      auto ref = std::make_shared<ToyMp>(torch::kCPU, torch::kCPU);
      return std::make_pair(ref, std::make_shared<torch::optim::SGD>(ref->parameters(), 0.1));
    };
    std::vector<at::Tensor> got;
    for (const auto& p : net->parameters()) got.push_back(p.cpu());
    expect_within(one_process("two-device parameters after 3 steps", make_ref, 3, 2,
                              [&](int) {
                                return Batch{data.inputs, data.targets};
                              }),
                  got);
    return 0;
  });
}

TEST(DdpTest, CheckpointResumeReproducesTheUninterruptedRun) {
  TempDir dir, dir2, ck;
  const std::string path = ck.file("ddp.pt");
  // The data is made in each rank, after the fork: a parent that ran a LibTorch op first leaves
  // the children a libgomp thread pool that does not exist (LibTorch 2.x hangs in Adam's step).
  auto steps = [&](training::DistributedDataParallel& ddp, torch::optim::Optimizer& opt, int from, int to, int rank) {
    const auto data = training::make_toy(8 * 12, 10, 5, 11);
    for (int k = from; k < to; ++k) {
      auto x = data.inputs.narrow(0, 8 * k + 4 * rank, 4), y = data.targets.narrow(0, 8 * k + 4 * rank, 4);
      auto loss = torch::mse_loss(ddp.forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  };
  // Uninterrupted: 12 steps, with a checkpoint after 6.
  auto codes = run_ranks(2, [&](int rank) {
    auto pg = join(dir, rank, 2);
    auto net = make(1);
    training::DistributedDataParallel ddp(net, pg);
    torch::optim::Adam opt(net->parameters(), 0.01);
    steps(ddp, opt, 0, 6, rank);
    training::save_checkpoint(path, *net, &opt, {{"step", 6}}, *pg);
    steps(ddp, opt, 6, 12, rank);
    if (rank == 0) torch::save(net->parameters(), ck.file("final.pt"));
    return 0;
  });
  for (int c : codes) ASSERT_EQ(c, 0);
  // Resumed: a fresh model and optimizer, loaded on every rank, 6 more steps.
  codes = run_ranks(2, [&](int rank) {
    auto pg = join(dir2, rank, 2);
    auto net = make(99);
    torch::optim::Adam opt(net->parameters(), 0.01);
    auto numbers = training::load_checkpoint(path, *net, &opt, torch::kCPU, *pg);
    expect(numbers["step"] == 6, "numbers round-trip");
    training::DistributedDataParallel ddp(net, pg);
    steps(ddp, opt, 6, 12, rank);
    std::vector<torch::Tensor> want;
    torch::load(want, ck.file("final.pt"));
    auto got = net->parameters();
    // The same operations in the same order from the same saved bits: equal but for kernels that
    // pick their path by the tensors' alignment (MKL), a few ulps.
    distrl::testing::Reorderings same("resumed parameters");
    same.add(want);
    const std::string e = same.check(got);
    expect(e.empty(), e);
    return 0;
  });
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST(DataTest, IdxRoundTripAndSamplerPartitions) {
  TempDir dir;
  auto images = torch::randint(0, 256, {10, 4, 3}, torch::kLong);
  auto labels = torch::arange(10) % 3;
  training::write_idx(dir.file("train-images-idx3-ubyte.gz"), dir.file("train-labels-idx1-ubyte"), images, labels);
  auto d = training::load_idx(dir.file("train-images-idx3-ubyte.gz"), dir.file("train-labels-idx1-ubyte"));
  ASSERT_EQ(d.size(), 10);
  EXPECT_EQ(d.inputs.sizes(), (std::vector<int64_t>{10, 1, 4, 3}));
  EXPECT_TRUE(torch::allclose(((d.inputs * 0.5 + 0.5) * 255).round().squeeze(1).to(torch::kLong), images));
  EXPECT_TRUE(torch::equal(d.targets, labels));
  // Truncated and mismatched files are refused by name.
  std::ofstream(dir.file("bad"), std::ios::binary) << std::string("\0\0\x08\x03\0\0\0\x05", 8);
  EXPECT_THROW(training::load_idx(dir.file("bad"), dir.file("train-labels-idx1-ubyte")), ConfigError);
  EXPECT_THROW(training::load_idx_dir(dir.path(), false), ConfigError);

  // 10 samples over 3 ranks: 4 each (padded by wrapping), every index covered, same order per epoch.
  std::vector<int> seen(10, 0);
  for (int r = 0; r < 3; ++r) {
    training::DistributedSampler s(10, r, 3, true, 42);
    s.set_epoch(2);
    auto idx = s.indices();
    ASSERT_EQ(idx.size(), 4u);
    for (auto i : idx) ++seen[i];
    training::DistributedSampler again(10, r, 3, true, 42);
    again.set_epoch(2);
    EXPECT_EQ(again.indices(), idx);
    again.set_epoch(3);
    EXPECT_NE(again.indices(), idx);
  }
  for (int c : seen) EXPECT_GE(c, 1);
}

}  // namespace
