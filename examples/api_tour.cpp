// The README's API tour, compiled: run it with `distrl-launch --nproc 2 -- build/examples/api_tour`.
// Rank 0 ("driver") calls into rank 1 ("worker1"): a function, a tensor function, a remote
// object with methods, and an async-execution handler that answers several callers at once.
#include <torch/torch.h>

#include <iostream>
#include <mutex>

#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

using namespace distrl::transport;

// A class peers construct remotely and call through an RRef.
class Counter {
 public:
  explicit Counter(int start) : value_(start) {}
  int increment(int by) {
    std::lock_guard<std::mutex> lock(mu_);
    return value_ += by;
  }
  int value() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }

 private:
  mutable std::mutex mu_;
  int value_;
};

// Async execution: each caller gets a Future that completes once `expected` callers have
// contributed; one handler thread is never held while it waits.
class SumGate {
 public:
  explicit SumGate(int expected) : expected_(expected) {}
  Future<int> contribute(int x) {
    std::lock_guard<std::mutex> lock(mu_);
    sum_ += x;
    waiting_.emplace_back();
    auto f = waiting_.back().get_future();
    if (static_cast<int>(waiting_.size()) == expected_) {
      for (auto& p : waiting_) p.set_value(sum_);
      waiting_.clear();
      sum_ = 0;
    }
    return f;
  }

 private:
  std::mutex mu_;
  int expected_, sum_ = 0;
  std::vector<Promise<int>> waiting_;
};

int main() {
  torch::set_num_threads(1);
  SumGate gate(2);
  RpcOptions opts;
  const char* rank = std::getenv("RANK");
  opts.name = (rank && std::string(rank) == "0") ? "driver" : "";  // others default to worker<rank>
  RpcAgent agent(opts, [&](RpcAgent& a) {
    a.register_function("add", [](int x, int y) { return x + y; });
    a.register_function("scale", [](at::Tensor t, double f) { return t * f; });
    a.register_function("contribute", [&](int x) { return gate.contribute(x); });
    a.register_class<Counter>("Counter")
        .constructor<int>()
        .method("increment", &Counter::increment)
        .method("value", &Counter::value);
  });

  bool ok = true;  // the tour checks its own answers; the exit code says whether they were right
  if (agent.rank() == 0) {
    const Target peer = 1;
    std::cout << "workers:";
    for (auto& w : agent.workers()) std::cout << " " << w.name << "@" << w.endpoint;
    std::cout << "\n";

    Future<int> sum = agent.rpc_async<int>(peer, "add", 2, 3);
    std::cout << "add(2, 3) = " << sum.value() << "\n";
    ok = ok && sum.value() == 5;

    at::Tensor doubled = agent.rpc_sync<at::Tensor>(peer, "scale", torch::arange(4, torch::kFloat32), 2.0);
    std::cout << "scale(arange(4), 2) = " << doubled << "\n";
    ok = ok && doubled.equal(torch::arange(4, torch::kFloat32) * 2);

    RRef<Counter> counter = agent.remote<Counter>(peer, "Counter", 10);
    counter.rpc_sync<int>("increment", 5);
    const int value = counter.rpc_sync<int>("value");
    std::cout << "Counter(10).increment(5) on " << counter.owner_name() << " -> " << value << "\n";
    ok = ok && value == 15;

    // Two calls in flight; the handler answers both once both have arrived.
    auto a = agent.rpc_async<int>(peer, "contribute", 20);
    auto b = agent.rpc_async<int>(peer, "contribute", 22);
    std::cout << "contribute(20) and contribute(22) both answer " << a.value() << " and " << b.value() << "\n";
    ok = ok && a.value() == 42 && b.value() == 42;

    try {
      agent.rpc_sync<int>(peer, "no_such_function");
      ok = false;
    } catch (const distrl::ProtocolError& e) {
      std::cout << "unknown function -> ProtocolError: " << e.what() << "\n";
    }
  }
  agent.shutdown();  // waits for every worker, like rpc.shutdown()
  std::cout << agent.name() << ": " << (ok ? "tour complete" : "WRONG ANSWERS") << ", shut down cleanly\n";
  return ok ? 0 : 1;
}
