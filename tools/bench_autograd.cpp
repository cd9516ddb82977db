// distrl-bench autograd: the distributed-autograd RNN tutorial at its own sizes (ntoken 7,
// ninp 2, nhid 3, 4 LSTM layers, 5 x 6 tokens per step, SGD lr 0.05), ps + trainer as two
// processes under distrl-launch: per-iteration forward, backward and optimizer step (median,
// p99), iterations/s, and the whole run's wall time including process start-up. Then a loop
// of contexts (each: one recorded RPC, backward, leave) checking that the live-context count
// returns to 0 on both workers and that resident memory stays flat.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "autograd/context.h"
#include "common/error.h"
#include "tools/bench.h"
#include "training/rnn/rnn.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

namespace distrl::tools {
namespace {

using Clock = std::chrono::steady_clock;

double rss_mib() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// The tutorial's sizes.
constexpr int kTokens = 7, kInput = 2, kHidden = 3, kLayers = 4, kBatch = 5, kIndices = 6;

}  // namespace

int run_autograd_worker(const std::string& out, int iterations, int contexts) {
  transport::RpcOptions o;                     // env:// from distrl-launch
  o.shutdown_timeout = std::chrono::hours(2);  // the ps waits while the trainer loops
  transport::RpcAgent agent(o, [](transport::RpcAgent& a) {
    training::register_rnn(a);
    a.register_function("bench.rss", [] { return rss_mib(); });
    a.register_function("bench.live", [&a] { return static_cast<std::uint64_t>(dist_autograd::live_contexts(a)); });
    a.register_function("bench.square", [](at::Tensor x) { return x * x; });
  });
  torch::set_num_threads(1);
  if (agent.rank() == 1) {
    autograd::OptimizerSpec spec;
    spec.kind = "sgd";
    spec.lr = 0.05;
    training::RnnTrainerModel model(agent, agent.workers().at(0).name, kTokens, kInput, kHidden, kLayers, 0.0, 1, spec);
    std::ofstream f(out);
    torch::manual_seed(0);
    for (int i = 0; i < iterations; ++i) {
      at::Tensor data = torch::randint(kTokens, {kBatch, kIndices}, torch::kInt64);
      at::Tensor target = torch::randint(kTokens, {kBatch, kIndices}, torch::kInt64);
      training::StepTimes t;
      model.train_step(data, target, &t);
      f << "iter," << t.forward << ',' << t.backward << ',' << t.step << '\n';
    }
    // Where the time goes (a run of its own, --contexts -1, outside the whole-run time): a
    // plain round trip with a small tensor, and the same model's compute in one process.
    if (contexts < 0) {
      at::Tensor x = torch::ones({kBatch, kIndices, kHidden});
      std::vector<double> rtt;
      for (int i = 0; i < 300; ++i) {
        const auto t0 = Clock::now();
        agent.rpc_sync<at::Tensor>(0, "bench.square", x);
        rtt.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      training::EmbeddingTableImpl emb(training::EmbeddingConfig{kTokens, kInput, 0.0, 1});
      training::DecoderImpl dec(training::DecoderConfig{kHidden, kTokens, 0.0, 1});
      torch::nn::LSTM lstm(torch::nn::LSTMOptions(kInput, kHidden).num_layers(kLayers));
      torch::optim::SGD sgd(lstm->parameters(), 0.05);
      std::vector<double> local;
      for (int i = 0; i < 300; ++i) {
        at::Tensor data = torch::randint(kTokens, {kBatch, kIndices}, torch::kInt64);
        at::Tensor target = torch::randint(kTokens, {kBatch, kIndices}, torch::kInt64);
        const auto t0 = Clock::now();
        auto out = std::get<0>(lstm->forward(emb.forward(data)));
        at::Tensor loss =
            torch::nn::functional::cross_entropy(dec.forward(out).reshape({-1, kTokens}), target.reshape({-1}));
        sgd.zero_grad();
        loss.backward();
        sgd.step();
        local.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      f << "base," << percentile(rtt, 0.5) << ',' << percentile(local, 0.5) << '\n';
    }
    if (contexts > 0) {
      const double rss0 = rss_mib(), ps0 = agent.rpc_sync<double>(0, "bench.rss");
      double rss_early = 0, ps_early = 0;
      at::Tensor x = torch::ones({4}, torch::kFloat32).requires_grad_(true);
      const auto start = Clock::now();
      for (int i = 0; i < contexts; ++i) {
        dist_autograd::Context ctx(agent);
        at::Tensor y = agent.rpc_sync<at::Tensor>(0, "bench.square", x);
        dist_autograd::backward(ctx, {y.sum()});
        if (i == contexts / 10) {
          rss_early = rss_mib();
          ps_early = agent.rpc_sync<double>(0, "bench.rss");
        }
      }
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      // Releases are acknowledged asynchronously: give the last ones a moment.
      std::uint64_t live_ps = 0, live_me = 0;
      for (int i = 0; i < 200; ++i) {
        live_ps = agent.rpc_sync<std::uint64_t>(0, "bench.live");
        live_me = dist_autograd::live_contexts(agent);
        if (live_ps == 0 && live_me == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      f << "contexts," << contexts << ',' << secs << ',' << live_me << ',' << live_ps << ',' << rss0 << ',' << rss_early
        << ',' << rss_mib() << ',' << ps0 << ',' << ps_early << ',' << agent.rpc_sync<double>(0, "bench.rss") << '\n';
    }
  }
  agent.shutdown();
  return 0;
}

int run_autograd_bench(const AutogradBenchOptions& opt) {
  auto worker = [](int iterations, int contexts) {
    return run_workers(2, "autograd-worker",
                       {"--iterations", std::to_string(iterations), "--contexts", std::to_string(contexts)});
  };
  // 1. the tutorial run, whole-process time included
  const auto start = Clock::now();
  const auto lines = worker(opt.iterations, 0);
  const double whole = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> fwd, bwd, stp, total;
  for (const auto& line : lines) {
    auto c = fields(line, 4, "autograd-worker");
    fwd.push_back(std::stod(c[1]) * 1e3);
    bwd.push_back(std::stod(c[2]) * 1e3);
    stp.push_back(std::stod(c[3]) * 1e3);
    total.push_back(fwd.back() + bwd.back() + stp.back());
  }
  if (static_cast<int>(total.size()) != opt.iterations)
    throw Error("autograd-worker wrote " + std::to_string(total.size()) + " iterations");
  double sum = 0;
  for (double t : total) sum += t;
  std::printf("distrl-bench autograd: the RNN tutorial (ps + trainer processes), %d iterations\n\n", opt.iterations);
  std::printf("%-12s %10s %10s\n", "phase", "median ms", "p99 ms");
  std::ofstream csv = open_csv(opt.csv);
  csv << "phase,median_ms,p99_ms\n";
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>&>{"forward", fwd},
                                {"backward", bwd},
                                {"step", stp},
                                {"iteration", total}}) {
    std::printf("%-12s %10.3f %10.3f\n", name, percentile(v, 0.5), percentile(v, 0.99));
    csv << name << ',' << percentile(v, 0.5) << ',' << percentile(v, 0.99) << '\n';
  }
  std::printf("\niterations/s %.0f; whole run (launch, rendezvous, %d iterations, shutdown): %.2f s\n",
              1e3 * static_cast<double>(total.size()) / sum, opt.iterations, whole);
  csv << "whole_run_s," << whole << ",\n";
  // 2. where the time goes (a run of its own, outside the whole-run time)
  for (const auto& line : worker(1, -1)) {
    if (line.rfind("base,", 0) != 0) continue;
    auto c = fields(line, 3, "autograd-worker");
    const double rtt_ms = std::stod(c[1]) * 1e3, local_ms = std::stod(c[2]) * 1e3;
    std::printf(
        "where the time goes: a plain rpc_sync round trip %.3f ms (median); the same model in one process "
        "%.3f ms per iteration; an iteration makes 6 sequential round trips (2 forward, 3 nested in backward, "
        "1 step) = %.3f ms + local compute\n",
        rtt_ms, local_ms, 6 * rtt_ms);
    csv << "rtt_ms," << rtt_ms << ",\nlocal_model_ms," << local_ms << ",\n";
  }
  // 3. the contexts loop
  if (opt.contexts > 0) {
    for (const auto& line : worker(1, opt.contexts)) {
      if (line.rfind("contexts,", 0) != 0) continue;
      auto c = fields(line, 11, "autograd-worker");
      std::printf(
          "\n%s contexts (one recorded RPC + backward each) in %.1f s (%.0f/s); live afterwards: trainer %s, ps %s\n",
          c[1].c_str(), std::stod(c[2]), std::stod(c[1]) / std::stod(c[2]), c[3].c_str(), c[4].c_str());
      std::printf(
          "RSS MiB  trainer: start %.1f, after 10%% %.1f, end %.1f;  ps: start %.1f, after 10%% %.1f, end %.1f\n",
          std::stod(c[5]), std::stod(c[6]), std::stod(c[7]), std::stod(c[8]), std::stod(c[9]), std::stod(c[10]));
      csv << "contexts," << c[1] << "\ncontexts_s," << c[2] << "\nlive_trainer," << c[3] << "\nlive_ps," << c[4]
          << "\nrss_trainer_mib," << c[5] << ';' << c[6] << ';' << c[7] << "\nrss_ps_mib," << c[8] << ';' << c[9] << ';'
          << c[10] << '\n';
    }
  }
  std::printf("wrote %s\n", opt.csv.c_str());
  return 0;
}

}  // namespace distrl::tools
