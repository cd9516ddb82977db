// Test helpers for distributed-autograd worlds (tests/integration/dist_autograd*_test.cpp):
// each worker owns a 4x4 weight, the same in every process, so that rank 0 can compute the
// model locally as the reference; hop() runs a chain of workers; Lane is a thread of its own
// where a dist_autograd::Context can be current.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <csignal>
#include <deque>
#include <future>
#include <map>
#include <unistd.h>

#include "autograd/context.h"
#include "autograd/detail/engine.h"
#include "tests/support/errors.h"
#include "tests/support/rpc_world.h"
#include "tests/support/tolerance.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::testing {

// Worker k's weight, the same in every process (so rank 0 can build the local reference).
inline at::Tensor weight_of(int k) {
  return (torch::arange(16, torch::kFloat64).reshape({4, 4}) / 16.0 - 0.4 + 0.1 * k).cos();
}

inline at::Tensor input() { return torch::linspace(-1, 1, 8, torch::kFloat64).reshape({2, 4}); }

inline at::Tensor local_hop(const at::Tensor& x, const at::Tensor& w) { return torch::tanh(x.matmul(w)); }

inline double rel_err(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

// One worker's part of the model: its weight and the functions that use it.
struct Worker {
  std::shared_ptr<at::Tensor> w;
  transport::RpcAgent* agent = nullptr;
};

// y = tanh(x @ W_me); then along `route` (ranks), each applying its own weight.
inline at::Tensor hop(Worker& me, const at::Tensor& x, std::vector<int> route) {
  at::Tensor y = local_hop(x, *me.w);
  if (route.empty()) return y;
  const int next = route.front();
  route.erase(route.begin());
  return me.agent->rpc_sync<at::Tensor>(next, "hop", y, route);
}

// Enables distributed autograd and registers hop, hop_pair, grad_of (this worker's weight's
// gradient in a context; empty when none), weight, reset_weight, param (an RRef to the weight), live,
// failed_parts and die_in_backward (x * 2, whose backward SIGKILLs this process).
inline void setup(transport::RpcAgent& a, Worker& me, autograd::AutogradOptions ao = {}) {
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
  a.register_function("reset_weight", [&me, &a]() {
    torch::NoGradGuard no_grad;
    me.w->copy_(weight_of(a.rank()));
  });
  a.register_function("param", [&me, &a]() { return a.make_rref(me.w); });
  a.register_function("live", [&a]() { return static_cast<std::uint64_t>(dist_autograd::live_contexts(a)); });
  a.register_function("failed_parts", [&a]() { return autograd::detail::engine_of(a)->stats().failed_parts; });
  a.register_function("die_in_backward", [](at::Tensor x) {
    struct Die : torch::autograd::Function<Die> {
      static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor v) { return v * 2; }
      static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                     torch::autograd::variable_list) {
        ::kill(::getpid(), SIGKILL);
        return {};
      }
    };
    return Die::apply(x);
  });
}

// Live contexts summed over ranks (asked over RPC outside any context, which would otherwise
// reach each rank asked; this worker's own counted locally).
inline std::uint64_t live_everywhere(transport::RpcAgent& agent, const std::vector<int>& ranks) {
  auto none = autograd::detail::engine_of(agent)->make_current(-1);
  std::uint64_t live = 0;
  for (int k : ranks)
    live += k == agent.rank() ? dist_autograd::live_contexts(agent) : agent.rpc_sync<std::uint64_t>(k, "live");
  return live;
}

// Rank 0 of a two-worker world checks ctx's gradients against one process's: x and worker0's
// weight here (expected gx, g0), worker1's weight there (expected g1).
inline void expect_gradients(transport::RpcAgent& agent, Worker& me, const dist_autograd::Context& ctx,
                             const at::Tensor& x, const at::Tensor& gx, const at::Tensor& g0, const at::Tensor& g1,
                             const std::string& what) {
  std::map<const void*, at::Tensor> mine;
  for (auto& [t, g] : dist_autograd::get_gradients(ctx)) mine[t.unsafeGetTensorImpl()] = g;
  auto agrees = [](const at::Tensor& got, const at::Tensor& want) {
    return got.defined() && rel_err(got, want) < kFloat64GraphTolerance;
  };
  expect(mine.size() == 2 && agrees(mine[x.unsafeGetTensorImpl()], gx) && agrees(mine[me.w->unsafeGetTensorImpl()], g0),
         "x's and worker0's gradients are " + what);
  expect(agrees(agent.rpc_sync<at::Tensor>(1, "grad_of", ctx.id()), g1), "worker1's gradient is " + what);
}

// A world of workers set up with setup() in which rank 0 runs a body while the others serve.
struct World {
  int size = 2;
  // Per rank, before its agent starts: its options and autograd options.
  std::function<void(int rank, transport::RpcOptions&, autograd::AutogradOptions&)> configure;
  std::function<void(transport::RpcAgent&, Worker&)> extra_setup;  // more functions, on every rank
};

// Runs the world: rank 0 runs body(agent, me); every rank then shuts down; every rank must
// exit 0 (a failed expect() in body makes rank 0 exit 1).
inline void run_on_rank0(const World& world, const std::function<void(transport::RpcAgent&, Worker&)>& body) {
  TempDir dir;
  auto codes = run_ranks(world.size, [&](int rank) {
    Worker me;
    transport::RpcOptions o = rpc_options(dir, rank, world.size);
    autograd::AutogradOptions ao;
    if (world.configure) world.configure(rank, o, ao);
    transport::RpcAgent agent(o, [&](transport::RpcAgent& a) {
      setup(a, me, ao);
      if (world.extra_setup) world.extra_setup(a, me);
    });
    if (rank == 0) body(agent, me);
    agent.shutdown();
    return 0;
  });
  EXPECT_EQ(codes, std::vector<int>(world.size, 0));
}

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

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace distrl::testing
