// Distributed autograd across real processes: gradients and optimizer steps equal a local
// model's when the same model is split over 2, 3 and 4 processes (a chain A->B->C->A, a tensor
// sent twice, a diamond, an unused RPC result), with repeated and concurrent backwards in one
// context, and for every optimizer kind against LibTorch's own; contexts are separate and
// released everywhere; a context left out of order or on another thread stops being current
// there only. Failures are in dist_autograd_fault_test.cpp, shared parameters (guards, DDP) in
// dist_autograd_sharing_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "autograd/optimizer.h"
#include "autograd/remote_module.h"
#include "tests/support/autograd_world.h"

using namespace distrl;
using namespace distrl::transport;
using namespace std::chrono_literals;
using namespace distrl::testing;

namespace {

// The model of each case, run on rank 0 inside a context; returns the loss.
using Model = std::function<at::Tensor(RpcAgent&, Worker&)>;
// The same model computed locally from weights w[k] (leaves).
using LocalModel = std::function<at::Tensor(std::vector<at::Tensor>&)>;

// Runs model distributed, compares every worker's gradient with the local model's, then K
// DistributedOptimizer steps against a local optimizer.
void check_parity(int world, const Model& model, const LocalModel& local) {
  run_on_rank0(World{world, {}, {}}, [&](RpcAgent& agent, Worker& me) {
    std::vector<at::Tensor> w;
    for (int k = 0; k < world; ++k) w.push_back(weight_of(k).requires_grad_(true));
    at::Tensor ref_loss = local(w);
    ref_loss.backward();
    {
      dist_autograd::Context ctx(agent);
      at::Tensor loss = model(agent, me);
      expect(rel_err(loss.detach(), ref_loss.detach()) < kFloat64GraphTolerance, "loss equals the local one");
      dist_autograd::backward(ctx, {loss});
      for (int k = 0; k < world; ++k) {
        at::Tensor g = agent.rpc_sync<at::Tensor>(k, "grad_of", ctx.id());
        expect(g.numel() == 16, "worker " + std::to_string(k) + " has a gradient");
        const double e = rel_err(g, w[k].grad());
        expect(e <= kFloat64GraphTolerance,
               "gradient of worker " + std::to_string(k) + " equals the local one (rel err " + std::to_string(e) + ")");
      }
      expect(!me.w->grad().defined(), ".grad is not touched by distributed backward");
    }
    // K optimizer steps: distributed vs local, SGD with momentum.
    std::vector<RRef<at::Tensor>> params;
    for (int k = 0; k < world; ++k) params.push_back(agent.rpc_sync<RRef<at::Tensor>>(k, "param"));
    autograd::OptimizerSpec spec;
    spec.kind = "sgd";
    spec.lr = 0.05;
    spec.momentum = 0.9;
    autograd::DistributedOptimizer dopt(agent, spec, params);
    std::vector<at::Tensor> lw;
    for (int k = 0; k < world; ++k) lw.push_back(weight_of(k).requires_grad_(true));
    torch::optim::SGD lopt(lw, torch::optim::SGDOptions(0.05).momentum(0.9));
    for (int step = 0; step < 3; ++step) {
      {
        dist_autograd::Context ctx(agent);
        at::Tensor loss = model(agent, me);
        dist_autograd::backward(ctx, {loss});
        dopt.step(ctx);
      }
      lopt.zero_grad();
      local(lw).backward();
      lopt.step();
    }
    for (int k = 0; k < world; ++k) {
      const double e = rel_err(agent.rpc_sync<at::Tensor>(k, "weight"), lw[k].detach());
      expect(e <= kFloat64GraphTolerance,
             "weights of worker " + std::to_string(k) + " after 3 steps (rel err " + std::to_string(e) + ")");
    }
    // Every context left: released on every worker that saw it.
    expect(distrl::testing::wait_until(
               [&] {
                 std::uint64_t live = 0;
                 for (int k = 0; k < world; ++k) live += agent.rpc_sync<std::uint64_t>(k, "live");
                 return live == 0;
               },
               10s),
           "no live contexts left anywhere");
  });
}

}  // namespace

TEST(DistAutogradTest, TwoProcessesMatchTheLocalModel) {
  check_parity(
      2,
      [](RpcAgent& a, Worker& me) {
        at::Tensor y = hop(me, input(), {1});
        return (y * y).sum();
      },
      [](std::vector<at::Tensor>& w) {
        at::Tensor y = local_hop(local_hop(input(), w[0]), w[1]);
        return (y * y).sum();
      });
}

// A -> B -> C -> A (rank 0's weight used twice, the second time inside a nested call), and the
// same tensor sent twice, once in two messages and once twice in one message.
TEST(DistAutogradTest, AChainBackToTheStartAndATensorSentTwiceMatchTheLocalModel) {
  check_parity(
      3,
      [](RpcAgent& a, Worker& me) {
        at::Tensor y = hop(me, input(), {1, 2, 0});
        at::Tensor twice = a.rpc_async<at::Tensor>(1, "hop", y, std::vector<int>{}).value() +
                           a.rpc_async<at::Tensor>(1, "hop", y, std::vector<int>{}).value();
        at::Tensor pair = a.rpc_sync<at::Tensor>(2, "hop_pair", y, y);
        return twice.sum() + (pair * pair).sum();
      },
      [](std::vector<at::Tensor>& w) {
        at::Tensor y = local_hop(local_hop(local_hop(local_hop(input(), w[0]), w[1]), w[2]), w[0]);
        at::Tensor twice = local_hop(y, w[1]) * 2;
        at::Tensor pair = torch::tanh((y * y).matmul(w[2]));
        return twice.sum() + (pair * pair).sum();
      });
}

// A fans out to B and C, both through D; an RPC result the loss does not use (D's) must not
// hang or fail the backward.
TEST(DistAutogradTest, FourProcessesWithAnUnusedResultMatchTheLocalModel) {
  check_parity(
      4,
      [](RpcAgent& a, Worker& me) {
        at::Tensor y = torch::tanh(input().matmul(*me.w));
        auto b = a.rpc_async<at::Tensor>(1, "hop", y, std::vector<int>{3});
        auto c = a.rpc_async<at::Tensor>(2, "hop", y, std::vector<int>{3});
        at::Tensor unused = a.rpc_sync<at::Tensor>(3, "hop", y, std::vector<int>{});
        expect(unused.requires_grad(), "an RPC result inside a context requires grad");
        return (b.value() * c.value()).sum();
      },
      [](std::vector<at::Tensor>& w) {
        at::Tensor y = local_hop(input(), w[0]);
        return (local_hop(local_hop(y, w[1]), w[3]) * local_hop(local_hop(y, w[2]), w[3])).sum();
      });
}

TEST(DistAutogradTest, ContextsKeepTheirGradientsApartAndNoContextRecordsNothing) {
  run_on_rank0({}, [&](RpcAgent& agent, Worker& me) {
    at::Tensor x = input().requires_grad_(true);
    at::Tensor plain = agent.rpc_sync<at::Tensor>(1, "hop", x, std::vector<int>{});
    expect(!plain.requires_grad(), "outside a context nothing is recorded");
    expect(agent.rpc_sync<std::uint64_t>(1, "live") == 0, "and no context appears on the peer");
    dist_autograd::Context c1(agent);
    at::Tensor l1 = agent.rpc_sync<at::Tensor>(1, "hop", x, std::vector<int>{}).sum();
    std::int64_t id2 = 0;
    {
      dist_autograd::Context c2(agent);  // nested: current until it ends
      id2 = c2.id();
      expect(c2.id() != c1.id(), "context ids differ");
      at::Tensor l2 = (agent.rpc_sync<at::Tensor>(1, "hop", x * 3, std::vector<int>{}) * 5).sum();
      dist_autograd::backward(c2, {l2});
      expect(dist_autograd::get_gradients(c2).size() == 1, "x's gradient in c2");
    }
    dist_autograd::backward(c1, {l1});
    auto g1 = dist_autograd::get_gradients(c1);
    expect(g1.size() == 1, "x's gradient in c1");
    // Local reference: the gradient of l1 alone.
    at::Tensor xl = input().requires_grad_(true);
    local_hop(xl, weight_of(1)).sum().backward();
    expect(rel_err(g1[0].second, xl.grad()) < kFloat64GraphTolerance, "c1 holds only its own gradient");
    at::Tensor w_c1 = agent.rpc_sync<at::Tensor>(1, "grad_of", c1.id());
    at::Tensor w_c2 = agent.rpc_sync<at::Tensor>(1, "grad_of", id2);
    expect(w_c1.numel() == 16 && w_c2.numel() == 0, "c2 was released on the peer; c1's gradient is there");
    bool refused = false;
    try {
      dist_autograd::backward(c1, {l1});
    } catch (const distrl::Error& e) {
      refused = std::string(e.what()).find("retain_graph") != std::string::npos;
    }
    expect(refused, "a second backward without retain_graph is refused, naming retain_graph");
  });
}

// RemoteModule: a module built on another worker, trained through dist autograd.
namespace {
struct TinyConfig {
  int in = 4, out = 3;
  MSGPACK_DEFINE(in, out);
};
}  // namespace

TEST(DistAutogradTest, RemoteModuleForwardsTrainsAndSwitchesMode) {
  TempDir dir;
  auto codes = run_ranks(2, [&](int rank) {
    RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) {
      dist_autograd::enable(a);
      autograd::register_remote_module<torch::nn::LinearImpl, TinyConfig>(a, "Linear", [](const TinyConfig& c) {
        torch::manual_seed(7);
        return std::make_shared<torch::nn::LinearImpl>(c.in, c.out);
      });
    });
    if (rank == 0) {
      autograd::RemoteModule<torch::nn::LinearImpl> lin(agent, "worker1", "Linear", TinyConfig{});
      torch::manual_seed(7);
      torch::nn::Linear local(4, 3);
      at::Tensor x = torch::randn({5, 4});
      expect(torch::allclose(lin.forward(x), local->forward(x)), "forward equals the same module run here");
      expect(lin.is_training(), "a new module trains");
      lin.eval();
      expect(!lin.is_training(), "eval() reached the owner");
      lin.train();
      auto params = lin.remote_parameters();
      expect(params.size() == 2 && params[0].owner_rank() == 1, "weight and bias, owned by worker1");
      autograd::OptimizerSpec spec;
      spec.kind = "adam";
      spec.lr = 0.05;
      autograd::DistributedOptimizer opt(agent, spec, params);
      at::Tensor target = torch::ones({5, 3});
      double first = 0, last = 0;
      for (int i = 0; i < 30; ++i) {
        dist_autograd::Context ctx(agent);
        at::Tensor loss = (lin.forward_async(x).value() - target).pow(2).mean();
        if (i == 0) first = loss.item<double>();
        last = loss.item<double>();
        dist_autograd::backward(ctx, {loss});
        opt.step(ctx);
      }
      expect(last < first * 0.5,
             "the remote module learns (" + std::to_string(first) + " -> " + std::to_string(last) + ")");
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Three backwards in one context (retain_graph=true twice, then without): every gradient, on
// both workers, is what one process accumulates over the same three passes; a fourth is
// refused naming retain_graph.
TEST(DistAutogradTest, BackwardsWithRetainGraphAccumulateInTheContext) {
  run_on_rank0({}, [&](RpcAgent& agent, Worker& me) {
    at::Tensor xl = input().requires_grad_(true), w0 = weight_of(0).requires_grad_(true),
               w1 = weight_of(1).requires_grad_(true);
    at::Tensor ly = local_hop(local_hop(xl, w0), w1);
    at::Tensor lloss = (ly * ly).sum();
    for (int i = 0; i < 3; ++i) lloss.backward({}, /*retain_graph=*/i < 2);
    dist_autograd::Context ctx(agent);
    at::Tensor x = input().requires_grad_(true);
    at::Tensor y = hop(me, x, {1});
    at::Tensor loss = (y * y).sum();
    for (int i = 0; i < 3; ++i) dist_autograd::backward(ctx, {loss}, /*retain_graph=*/i < 2);
    expect_gradients(agent, me, ctx, x, xl.grad(), w0.grad(), w1.grad(), "three passes' sum");
    const std::string again = error_of<distrl::Error>([&] { dist_autograd::backward(ctx, {loss}); });
    expect(contains(again, "retain_graph"), "a fourth backward is refused naming retain_graph: " + again);
  });
}

// Two threads run backward in one context at the same time, from two losses that share the
// graph through worker1 (retain_graph): the context holds both passes' sum, as one process has.
TEST(DistAutogradTest, TwoBackwardsAtOnceInOneContextAddUp) {
  run_on_rank0({}, [&](RpcAgent& agent, Worker& me) {
    at::Tensor xl = input().requires_grad_(true), w0 = weight_of(0).requires_grad_(true),
               w1 = weight_of(1).requires_grad_(true);
    at::Tensor ly = local_hop(local_hop(xl, w0), w1);
    (ly * ly).sum().backward({}, true);
    ly.sin().sum().backward();
    dist_autograd::Context ctx(agent);
    at::Tensor x = input().requires_grad_(true);
    at::Tensor y = hop(me, x, {1});
    at::Tensor l1 = (y * y).sum(), l2 = y.sin().sum();
    {
      Lane other;
      auto second = other.post([&] { dist_autograd::backward(ctx, {l2}, true); });
      dist_autograd::backward(ctx, {l1}, true);
      second.get();
    }
    expect_gradients(agent, me, ctx, x, xl.grad(), w0.grad(), w1.grad(), "both passes' sum");
  });
}

// A diamond: y is sent twice to worker1 and the two results summed. The gradients equal one
// process's. The gradients for y come back in two messages and each runs y's upstream part on
// its own (exact by linearity): a hook on the leaf x runs once per part, twice here where one
// process runs it once, and its values add up to the one call's (autograd/README.md).
TEST(DistAutogradTest, ADiamondMatchesOneProcessAndLeafHooksRunOncePerPart) {
  run_on_rank0({}, [&](RpcAgent& agent, Worker& me) {
    auto hooked = [](int* calls, at::Tensor* sum) {
      at::Tensor x = input().requires_grad_(true);
      x.register_hook([calls, sum](at::Tensor g) {
        ++*calls;
        *sum = sum->defined() ? *sum + g : g.clone();
      });
      return x;
    };
    int local_calls = 0, calls = 0;
    at::Tensor local_sum, sum;
    at::Tensor xl = hooked(&local_calls, &local_sum), w0 = weight_of(0).requires_grad_(true),
               w1 = weight_of(1).requires_grad_(true);
    at::Tensor yl = local_hop(xl, w0);
    (local_hop(yl, w1) + local_hop(yl, w1)).pow(2).sum().backward();
    dist_autograd::Context ctx(agent);
    at::Tensor x = hooked(&calls, &sum);
    at::Tensor y = local_hop(x, *me.w);
    auto a = agent.rpc_async<at::Tensor>(1, "hop", y, std::vector<int>{});
    auto b = agent.rpc_async<at::Tensor>(1, "hop", y, std::vector<int>{});
    dist_autograd::backward(ctx, {(a.value() + b.value()).pow(2).sum()});
    expect_gradients(agent, me, ctx, x, xl.grad(), w0.grad(), w1.grad(), "one process's");
    expect(local_calls == 1 && calls == 2, "the hook ran once in one process, once per part here (" +
                                               std::to_string(local_calls) + ", " + std::to_string(calls) + ")");
    expect(rel_err(sum, local_sum) < kFloat64GraphTolerance, "the hook's values add up to the one call's");
  });
}

// DistributedOptimizer against LibTorch's own optimizer over the same model in one process:
// after three steps both workers' weights (worker0 stepped in place, worker1 by RPC) equal
// LibTorch's, for SGD with Nesterov momentum and weight decay, Adagrad with lr_decay and weight
// decay (at its own default eps), Adam with weight decay.
TEST(DistAutogradTest, DistributedOptimizersMatchLibTorchsOwn) {
  using LocalOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;
  std::vector<std::pair<autograd::OptimizerSpec, LocalOptimizer>> cases;
  autograd::OptimizerSpec sgd{"sgd", 0.05};
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01;
  cases.emplace_back(sgd, [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(
        p, torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(0.01));
  });
  autograd::OptimizerSpec adagrad{"adagrad", 0.1};
  adagrad.lr_decay = 0.01;
  adagrad.weight_decay = 0.02;
  cases.emplace_back(adagrad, [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::Adagrad>(p,
                                                   torch::optim::AdagradOptions(0.1).lr_decay(0.01).weight_decay(0.02));
  });
  autograd::OptimizerSpec adam{"adam", 0.01};
  adam.weight_decay = 0.05;
  cases.emplace_back(adam, [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01).weight_decay(0.05));
  });
  run_on_rank0({}, [&](RpcAgent& agent, Worker& me) {
    for (auto& [spec, make_local] : cases) {
      agent.rpc_sync<void>(1, "reset_weight");
      {
        torch::NoGradGuard no_grad;
        me.w->copy_(weight_of(0));
      }
      autograd::DistributedOptimizer dopt(agent, spec,
                                          {agent.make_rref(me.w), agent.rpc_sync<RRef<at::Tensor>>(1, "param")});
      std::vector<at::Tensor> lw{weight_of(0).requires_grad_(true), weight_of(1).requires_grad_(true)};
      auto lopt = make_local(lw);
      for (int step = 0; step < 3; ++step) {
        {
          dist_autograd::Context ctx(agent);
          at::Tensor y = hop(me, input(), {1});
          dist_autograd::backward(ctx, {(y * y).sum()});
          dopt.step(ctx);
        }
        lopt->zero_grad();
        at::Tensor ly = local_hop(local_hop(input(), lw[0]), lw[1]);
        (ly * ly).sum().backward();
        lopt->step();
      }
      const double e0 = rel_err(me.w->detach(), lw[0].detach()),
                   e1 = rel_err(agent.rpc_sync<at::Tensor>(1, "weight"), lw[1].detach());
      std::ostringstream errs;
      errs << e0 << ", " << e1;
      expect(e0 < kFloat64GraphTolerance && e1 < kFloat64GraphTolerance,
             spec.kind + ": weights after 3 steps equal LibTorch's (rel err " + errs.str() + ")");
    }
  });
}

// Contexts left out of order, or on a thread other than the one that made them: each stops
// being current where it was made, and only it (the scope used to pop whatever was on top of
// the destroying thread's stack).
TEST(DistAutogradTest, AContextLeftOutOfOrderOrOnAnotherThreadStopsBeingCurrentOnlyThere) {
  run_on_rank0({}, [&](RpcAgent& agent, Worker& me) {
    // y = hop(x) on worker1, recorded in the current context: its backward gives x's gradient.
    auto recorded_in = [&](const dist_autograd::Context& ctx) {
      at::Tensor x = input().requires_grad_(true);
      at::Tensor y = agent.rpc_sync<at::Tensor>(1, "hop", x, std::vector<int>{});
      if (!y.requires_grad()) return false;
      dist_autograd::backward(ctx, {y.sum()});
      at::Tensor xl = input().requires_grad_(true);
      local_hop(xl, weight_of(1)).sum().backward();
      auto g = dist_autograd::get_gradients(ctx);
      return g.size() == 1 && rel_err(g[0].second, xl.grad()) < kFloat64GraphTolerance;
    };
    auto outer = std::make_unique<dist_autograd::Context>(agent);
    auto inner = std::make_unique<dist_autograd::Context>(agent);
    outer.reset();  // out of order
    expect(recorded_in(*inner), "the inner context is still current after the outer one was left");
    inner.reset();
    Lane lane;
    std::unique_ptr<dist_autograd::Context> theirs;
    lane.post([&] { theirs = std::make_unique<dist_autograd::Context>(agent); }).get();
    dist_autograd::Context mine(agent);
    theirs.reset();  // left on this thread, made on the lane
    expect(recorded_in(mine), "this thread's context is still current");
    bool outside = false;
    lane.post([&] {
          outside =
              !agent.rpc_sync<at::Tensor>(1, "hop", input().requires_grad_(true), std::vector<int>{}).requires_grad();
        })
        .get();
    expect(outside, "on the lane no context is current any more");
    expect(wait_until([&] { return agent.rpc_sync<std::uint64_t>(1, "live") == 1; }, 10s),
           "worker1 holds only this thread's context");
  });
}
