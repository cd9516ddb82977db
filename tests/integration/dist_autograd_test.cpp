// Distributed autograd across real processes: gradients and optimizer steps equal a local
// model's when the same model is split over 2, 3 and 4 processes (a chain A->B->C->A, a tensor
// sent twice, an unused RPC result); contexts are separate and released everywhere; a killed
// peer fails the backward and the step on every survivor, naming it; malformed gradient
// messages are refused with typed errors while the worker keeps serving.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <csignal>
#include <deque>
#include <future>
#include <unistd.h>

#include "autograd/context.h"
#include "autograd/detail/engine.h"
#include "autograd/optimizer.h"
#include "autograd/remote_module.h"
#include "autograd/step_guard.h"
#include "tests/support/multiproc.h"
#include "tests/support/rpc_world.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/tensor.h"

using namespace distrl;
using namespace distrl::transport;
using namespace std::chrono_literals;
using distrl::testing::run_ranks;
using distrl::testing::TempDir;
using distrl::testing::expect;
using distrl::testing::rpc_options;

namespace {


// Worker k's weight, the same in every process (so rank 0 can build the local reference).
at::Tensor weight_of(int k) {
  return (torch::arange(16, torch::kFloat64).reshape({4, 4}) / 16.0 - 0.4 + 0.1 * k).cos();
}

// One worker's part of the model: its weight and the functions that use it.
struct Worker {
  std::shared_ptr<at::Tensor> w;
  RpcAgent* agent = nullptr;
};

// y = tanh(x @ W_me); then along `route` (ranks), each applying its own weight.
at::Tensor hop(Worker& me, const at::Tensor& x, std::vector<int> route) {
  at::Tensor y = torch::tanh(x.matmul(*me.w));
  if (route.empty()) return y;
  const int next = route.front();
  route.erase(route.begin());
  return me.agent->rpc_sync<at::Tensor>(next, "hop", y, route);
}

void setup(RpcAgent& a, Worker& me, autograd::AutogradOptions ao = {}) {
  dist_autograd::enable(a, ao);
  me.agent = &a;
  me.w = std::make_shared<at::Tensor>(weight_of(a.rank()).requires_grad_(true));
  a.register_function("hop", [&me](at::Tensor x, std::vector<int> route) { return hop(me, x, route); });
  // One request carrying the same tensor twice.
  a.register_function("hop_pair", [&me](at::Tensor a1, at::Tensor a2) { return torch::tanh((a1 * a2).matmul(*me.w)); });
  a.register_function("grad_of", [&me, &a](std::int64_t ctx) {
    for (auto& [t, g] : dist_autograd::get_gradients(a, ctx))
      if (t.unsafeGetTensorImpl() == me.w->unsafeGetTensorImpl()) return g;
    return at::Tensor(torch::zeros({0}));
  });
  a.register_function("weight", [&me]() { return me.w->detach().clone(); });
  a.register_function("param", [&me, &a]() { return a.make_rref(me.w); });
  a.register_function("live", [&a]() { return static_cast<std::uint64_t>(dist_autograd::live_contexts(a)); });
  a.register_function("failed_parts", [&a]() { return autograd::detail::engine_of(a)->stats().failed_parts; });
  a.register_function("die_in_backward", [](at::Tensor x) {
    // Multiplies by 2; its backward kills this process (a peer lost mid-backward).
    struct Die : torch::autograd::Function<Die> {
      static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor v) { return v * 2; }
      static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list) {
        ::kill(::getpid(), SIGKILL);
        return {};
      }
    };
    return Die::apply(x);
  });
}

double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

at::Tensor input() { return torch::linspace(-1, 1, 8, torch::kFloat64).reshape({2, 4}); }

// The model of each case, run on rank 0 inside a context; returns the loss.
using Model = std::function<at::Tensor(RpcAgent&, Worker&)>;
// The same model computed locally from weights w[k] (leaves).
using LocalModel = std::function<at::Tensor(std::vector<at::Tensor>&)>;

// Runs model distributed, compares every worker's gradient with the local model's, then K
// DistributedOptimizer steps against a local optimizer.
void check_parity(int world, const Model& model, const LocalModel& local) {
  TempDir dir;
  auto codes = run_ranks(world, [&](int rank) {
    Worker me;
    RpcAgent agent(rpc_options(dir, rank, world), [&](RpcAgent& a) { setup(a, me); });
    if (rank == 0) {
      std::vector<at::Tensor> w;
      for (int k = 0; k < world; ++k) w.push_back(weight_of(k).requires_grad_(true));
      at::Tensor ref_loss = local(w);
      ref_loss.backward();
      {
        dist_autograd::Context ctx(agent);
        at::Tensor loss = model(agent, me);
        expect(rel_err(loss.detach(), ref_loss.detach()) < 1e-12, "loss equals the local one");
        dist_autograd::backward(ctx, {loss});
        for (int k = 0; k < world; ++k) {
          at::Tensor g = agent.rpc_sync<at::Tensor>(k, "grad_of", ctx.id());
          expect(g.numel() == 16, "worker " + std::to_string(k) + " has a gradient");
          const double e = rel_err(g, w[k].grad());
          expect(e <= 1e-6, "gradient of worker " + std::to_string(k) + " equals the local one (rel err " + std::to_string(e) + ")");
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
        expect(e <= 1e-6, "weights of worker " + std::to_string(k) + " after 3 steps (rel err " + std::to_string(e) + ")");
      }
      // Every context left: released on every worker that saw it.
      expect(distrl::testing::wait_until([&] {
        std::uint64_t live = 0;
        for (int k = 0; k < world; ++k) live += agent.rpc_sync<std::uint64_t>(k, "live");
        return live == 0;
      }, 10s), "no live contexts left anywhere");
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>(world, 0));
}

at::Tensor local_hop(const at::Tensor& x, const at::Tensor& w) { return torch::tanh(x.matmul(w)); }

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
  TempDir dir;
  auto codes = run_ranks(2, [&](int rank) {
    Worker me;
    RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) { setup(a, me); });
    if (rank == 0) {
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
      expect(rel_err(g1[0].second, xl.grad()) < 1e-9, "c1 holds only its own gradient");
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
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// Rank 2 dies inside its backward (a SIGKILL from its own autograd function): ranks 0 and 1
// fail their parts at once, naming the dead worker; their contexts are gone afterwards.
TEST(DistAutogradTest, APeerKilledMidBackwardFailsEverySurvivorNamingIt) {
  TempDir dir;
  auto codes = run_ranks(3, [&](int rank) {
    Worker me;
    RpcOptions o = rpc_options(dir, rank, 3);
    o.shutdown_timeout = 5s;
    RpcAgent agent(o, [&](RpcAgent& a) {
      setup(a, me);
      a.register_function("via_dying", [&a](at::Tensor x) { return a.rpc_sync<at::Tensor>(2, "die_in_backward", x); });
    });
    if (rank == 0) {
      std::string error;
      double seconds = 0;
      {
        dist_autograd::Context ctx(agent);
        at::Tensor x = input().requires_grad_(true);
        at::Tensor y = agent.rpc_sync<at::Tensor>(1, "via_dying", x);
        const auto start = std::chrono::steady_clock::now();
        try {
          dist_autograd::backward(ctx, {y.sum()});
        } catch (const dist_autograd::BackwardError& e) {
          error = e.what();
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      std::cout << "backward failed after " << seconds << " s: " << error << std::endl;
      expect(error.find("worker2") != std::string::npos, "the error names the dead worker: " + error);
      expect(error.find("context 0:") != std::string::npos, "the error names the context: " + error);
      expect(seconds < 5, "the failure arrived in " + std::to_string(seconds) + " s");
      expect(agent.rpc_sync<std::uint64_t>(1, "failed_parts") >= 1, "worker1's part failed too");
      expect(distrl::testing::wait_until([&] {
        return agent.rpc_sync<std::uint64_t>(1, "live") == 0 && dist_autograd::live_contexts(agent) == 0;
      }, 5s), "live contexts on the survivors return to 0");
      // The optimizer step fails too, naming the dead owner.
      std::vector<RRef<at::Tensor>> params{agent.rpc_sync<RRef<at::Tensor>>(1, "param")};
      autograd::DistributedOptimizer opt(agent, autograd::OptimizerSpec{}, params);
      std::string step_error;
      try {
        dist_autograd::Context ctx(agent);
        opt.step(ctx);  // worker1 is alive: fine
        agent.rpc_sync<at::Tensor>(1, "hop", input(), std::vector<int>{2});  // worker1 saw it die
      } catch (const std::exception& e) {
        step_error = e.what();
      }
      expect(step_error.find("worker2") != std::string::npos, "calls through the dead peer fail naming it: " + step_error);
    }
    if (rank == 2) {  // dies in backward
      distrl::testing::wait_until([] { return false; }, 30s);
      return 1;
    }
    try {
      // Worker1 serves until rank 0 is done however slow the machine (its own shutdown bound
      // is 5 s so that nobody waits long for the dead rank; seen: rank 1 left after 5 s on a
      // loaded CI machine before rank 0 had made its first call).
      if (rank == 1) agent.serve_until_shutdown(0);
      agent.shutdown();
    } catch (const std::exception& e) {
      std::cout << "rank " << rank << " shutdown: " << e.what() << std::endl;
    }
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
}

// Gradient messages that do not fit what was sent are refused with ProtocolError (as a
// RemoteError naming it) and the worker keeps serving.
TEST(DistAutogradTest, MalformedGradientMessagesAreRefusedAndTheWorkerKeepsServing) {
  TempDir dir;
  auto codes = run_ranks(2, [&](int rank) {
    Worker me;
    std::int64_t msg = -1;
    RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) {
      setup(a, me);
      // Rank 0 learns the message id of what rank 1 sent from the received tensor's grad_fn.
      a.register_function("remember", [&msg](at::Tensor t) {
        auto* recv = dynamic_cast<autograd::detail::RecvBackward*>(t.grad_fn().get());
        expect(recv != nullptr && recv->src == 1, "a received tensor leads back to its sender");
        msg = recv->msg;
      });
      a.register_function("forge", [&a, &msg](std::int64_t ctx) {
        auto refused = [&](std::int64_t c, std::int64_t m, std::vector<std::uint32_t> frames, std::vector<at::Tensor> g,
                           const std::string& needle) {
          try {
            a.rpc_sync<void>(1, autograd::detail::kGradsFn, c, m, frames, g);
          } catch (const RemoteError& e) {
            const std::string what = e.what();
            expect(what.find("ProtocolError") != std::string::npos && what.find(needle) != std::string::npos,
                   "refused with ProtocolError naming '" + needle + "': " + what);
            expect(a.rpc_sync<std::uint64_t>(1, "live") == 1, "and worker1 keeps serving");
            return;
          }
          throw std::runtime_error("forged gradients were accepted: " + needle);
        };
        const at::Tensor good = torch::ones({2, 4}, torch::kFloat64);
        refused(ctx + 12345, msg, {1}, {good}, "unknown distributed-autograd context");
        refused(ctx, msg + 777, {1}, {good}, "unknown autograd message");
        refused(ctx, msg, {1}, {torch::ones({4, 2}, torch::kFloat64)}, "is Double[4, 2], the tensor sent was Double[2, 4]");
        refused(ctx, msg, {1}, {torch::ones({2, 4}, torch::kFloat32)}, "is Float[2, 4]");
        refused(ctx, msg, {2}, {good}, "sent no tensor that requires grad in frame 2");
        refused(ctx, msg, {1, 1}, {good}, "2 frame numbers but 1 gradients");
      });
    });
    if (rank == 1) {
      dist_autograd::Context ctx(agent);
      agent.rpc_sync<void>(0, "remember", torch::tanh(input().matmul(*me.w)));
      agent.rpc_sync<void>(0, "forge", ctx.id());
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// A peer cannot make a worker hold more than max_live_contexts contexts, nor bring more than
// max_received_per_context messages that require grad in one: one more is refused with
// ProtocolError naming the option; once contexts are left, new ones are served again.
TEST(DistAutogradTest, APeerCannotMakeAWorkerHoldMoreContextsThanTheLimit) {
  TempDir dir;
  auto codes = run_ranks(2, [&](int rank) {
    Worker me;
    autograd::AutogradOptions ao;
    ao.max_live_contexts = rank == 1 ? 3 : 1000;
    ao.max_received_per_context = rank == 1 ? 2 : 1000;
    RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) { setup(a, me, ao); });
    if (rank == 0) {
      at::Tensor x = input().requires_grad_(true);
      auto call = [&] { return agent.rpc_sync<at::Tensor>(1, "hop", x, std::vector<int>{}); };
      {
        dist_autograd::Context c1(agent);
        call();
        dist_autograd::Context c2(agent);
        call();
        dist_autograd::Context c3(agent);
        call();
        expect(agent.rpc_sync<std::uint64_t>(1, "live") == 3, "worker1 holds the three contexts");
        dist_autograd::Context c4(agent);
        std::string refused;
        try {
          call();
        } catch (const RemoteError& e) {
          refused = e.what();
        }
        expect(refused.find("max_live_contexts") != std::string::npos && refused.find("ProtocolError") != std::string::npos,
               "the fourth context is refused naming the limit: " + refused);
      }
      expect(distrl::testing::wait_until([&] { return agent.rpc_sync<std::uint64_t>(1, "live") == 0; }, 10s),
             "the contexts left are released on worker1");
      dist_autograd::Context again(agent);
      expect(call().requires_grad(), "a new context is served again");
      call();  // the second message of this context that requires grad: still within the limit
      std::string too_many;
      try {
        call();
      } catch (const distrl::ProtocolError& e) {
        too_many = e.what();
      }
      expect(too_many.find("max_received_per_context") != std::string::npos,
             "a third message requiring grad in one context is refused naming the limit: " + too_many);
      expect(agent.rpc_sync<std::uint64_t>(1, "live") == 1, "and worker1 keeps serving");
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
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
      expect(last < first * 0.5, "the remote module learns (" + std::to_string(first) + " -> " + std::to_string(last) + ")");
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

// ParameterGuard: two contexts of one trainer run the owner's forward before either steps
// (the tutorial's model-on-server crash with two trainers). Without a guard the second step
// is computed against parameters the first changed; serialize makes the second forward wait
// for the first step (the result equals two steps in a row); versioned refuses the second step
// by name; hogwild lets both step.
namespace {

// A thread of its own (where a dist_autograd::Context can be current) that runs posted tasks.
class Lane {
 public:
  Lane() : t_([this] { run(); }) {}
  ~Lane() {
    post(nullptr);
    t_.join();
  }
  std::future<void> post(std::function<void()> fn) {
    const bool last = !fn;
    std::packaged_task<void()> task(last ? [] {} : std::move(fn));
    auto f = task.get_future();
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back({std::move(task), last});
    cv_.notify_one();
    return f;
  }

 private:
  void run() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !q_.empty(); });
      auto item = std::move(q_.front());
      q_.pop_front();
      lock.unlock();
      item.first();
      if (item.second) return;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::packaged_task<void()>, bool>> q_;
  std::thread t_;
};

at::Tensor guarded_forward(const at::Tensor& x, const at::Tensor& w) { return torch::tanh(x.matmul(w.pow(2))); }

// Runs the two-context interleaving under policy ("none": no guard); returns on rank 1.
void interleave_two_contexts(const std::string& policy) {
  TempDir dir;
  auto codes = run_ranks(2, [&](int rank) {
    auto w = std::make_shared<at::Tensor>(weight_of(0).requires_grad_(true));
    std::shared_ptr<autograd::ParameterGuard> guard;
    RpcAgent agent(rpc_options(dir, rank, 2), [&](RpcAgent& a) {
      dist_autograd::enable(a);
      if (policy != "none") guard = autograd::ParameterGuard::create(a, {*w}, autograd::parse_step_policy(policy), 5s);
      a.register_function("forward", [w, &guard](at::Tensor x) {
        if (guard) guard->enter();
        return guarded_forward(x, *w);
      });
      a.register_function("param", [w, &a]() { return a.make_rref(w); });
      a.register_function("weight", [w]() { return w->detach().clone(); });
      a.register_function("guard", [&guard]() {
        auto s = guard->stats();
        return std::vector<std::uint64_t>{s.version, s.stale_refused, s.waits};
      });
    });
    if (rank == 1) {
      autograd::DistributedOptimizer opt(agent, autograd::OptimizerSpec{"sgd", 0.1},
                                         {agent.rpc_sync<RRef<at::Tensor>>(0, "param")});
      const at::Tensor x = input();
      Lane la, lb;
      std::unique_ptr<dist_autograd::Context> ca, cb;
      at::Tensor ya, yb;
      std::string b_backward, b_step;
      la.post([&] {
        ca = std::make_unique<dist_autograd::Context>(agent);
        ya = agent.rpc_sync<at::Tensor>(0, "forward", x);
      }).get();
      auto fb = lb.post([&] {
        cb = std::make_unique<dist_autograd::Context>(agent);
        yb = agent.rpc_sync<at::Tensor>(0, "forward", x);
      });
      if (policy == "serialize")
        expect(fb.wait_for(300ms) == std::future_status::timeout, "serialize: the second forward waits for the first step");
      else
        fb.wait();
      la.post([&] {
        dist_autograd::backward(*ca, {ya.sum()});
        opt.step(*ca);
        ca.reset();
      }).get();
      fb.get();
      lb.post([&] {
        try {
          dist_autograd::backward(*cb, {yb.sum()});
        } catch (const dist_autograd::BackwardError& e) {
          b_backward = e.what();
        }
        if (b_backward.empty()) {
          try {
            opt.step(*cb);
          } catch (const autograd::StaleStepError& e) {
            b_step = e.what();
          }
        }
        cb.reset();
      }).get();
      // The reference: one or two plain SGD steps in this process.
      at::Tensor w0 = weight_of(0).requires_grad_(true);
      guarded_forward(x, w0).sum().backward();
      at::Tensor w1 = (w0 - 0.1 * w0.grad()).detach().requires_grad_(true);
      guarded_forward(x, w1).sum().backward();
      at::Tensor w2 = (w1 - 0.1 * w1.grad()).detach();
      const at::Tensor now = agent.rpc_sync<at::Tensor>(0, "weight");
      if (policy == "none") {
        // PyTorch's Python optimizers bump the version counter and the second backward fails
        // (the tutorial's crash); LibTorch's do not: the second step is silently computed
        // against parameters that changed under it.
        expect(b_backward.empty() && b_step.empty(), "unguarded: both contexts step: " + b_backward + b_step);
        expect(rel_err(now, w2) > 1e-6, "unguarded: the second step differs from one on fresh parameters");
      } else {
        const auto st = agent.rpc_sync<std::vector<std::uint64_t>>(0, "guard");
        expect(b_backward.empty(), policy + ": the second backward completes: " + b_backward);
        if (policy == "serialize") {
          expect(b_step.empty() && rel_err(now, w2) < 1e-9, "serialize: two steps in a row, each on fresh parameters");
          expect(st[0] == 2 && st[2] == 1, "serialize: version 2, one wait");
        } else if (policy == "versioned") {
          expect(b_step.find("stale step refused") != std::string::npos &&
                     b_step.find("version 0") != std::string::npos && b_step.find("version 1") != std::string::npos,
                 "versioned: the stale step is refused naming both versions: " + b_step);
          expect(rel_err(now, w1.detach()) < 1e-9, "versioned: only the first step applied");
          expect(st[0] == 1 && st[1] == 1, "versioned: version 1, one refusal");
        } else {
          expect(b_step.empty() && st[0] == 2, "hogwild: both steps applied");
          expect(rel_err(now, w1.detach()) > 1e-6, "hogwild: the second step changed the parameters");
        }
      }
    }
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

}  // namespace

TEST(DistAutogradTest, WithoutAGuardASecondContextStepsOnStaleParameters) { interleave_two_contexts("none"); }
TEST(DistAutogradTest, SerializeGuardMakesTheSecondForwardWaitForTheFirstStep) { interleave_two_contexts("serialize"); }
TEST(DistAutogradTest, VersionedGuardRefusesAStaleStepByName) { interleave_two_contexts("versioned"); }
TEST(DistAutogradTest, HogwildGuardLetsEveryContextStep) { interleave_two_contexts("hogwild"); }
