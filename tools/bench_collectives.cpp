// distrl-bench allreduce / ddp: the process group and DDP, measured with real processes
// started by distrl-launch. Each suite re-runs this binary as the hidden worker subcommand
// on every rank; rank 0 writes its measurements to a file the parent turns into a table.
#include <signal.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/failpoint.h"
#include "models/nets.h"
#include "models/torch_threads.h"
#include "tools/bench.h"
#include "tools/config_launch.h"
#include "tools/launcher.h"
#include "training/ddp/ddp.h"
#include "transport/collectives/process_group.h"

namespace distrl::tools {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::shared_ptr<transport::ProcessGroup> join(bool hierarchical = true) {
  transport::ProcessGroupOptions o;  // env:// from distrl-launch
  o.timeout = std::chrono::seconds(120);
  o.hierarchical = hierarchical;
  return transport::init_process_group(o);
}

// all_reduce of `numel` floats, rank r holding (i % 1024) + r at element i: the sum is exact in
// float32 (small integers), n * (i % 1024) + n(n-1)/2, and the average that over n. Throws
// naming the first wrong element.
void check_all_reduce(transport::ProcessGroup& pg, std::int64_t numel) {
  const int n = pg.size(), r = pg.rank();
  const auto base = torch::arange(numel, torch::kLong).remainder(1024).to(torch::kFloat);
  for (auto op : {transport::ReduceOp::Sum, transport::ReduceOp::Avg}) {
    at::Tensor t = base + r;
    pg.all_reduce(t, op);
    at::Tensor want = base * n + n * (n - 1) / 2.0;
    if (op == transport::ReduceOp::Avg) want = want / n;
    const auto wrong = (t - want).abs().gt(1e-3 * want.abs().clamp_min(1)).nonzero();
    if (wrong.numel() > 0) {
      const std::int64_t i = wrong[0][0].item<std::int64_t>();
      throw Error("all_reduce " + std::string(transport::to_string(op)) + " of " + std::to_string(numel) +
                  " floats on rank " + std::to_string(r) + ": element " + std::to_string(i) + " is " +
                  std::to_string(t[i].item<float>()) + ", expected " + std::to_string(want[i].item<float>()));
    }
  }
}

// Slowest rank's value.
double max_over_ranks(transport::ProcessGroup& pg, double v) {
  auto t = torch::tensor({v}, torch::kDouble);
  pg.all_reduce(t, transport::ReduceOp::Max);
  return t.item<double>();
}

std::string human_bytes(std::int64_t b) {
  if (b >= (1 << 20)) return std::to_string(b >> 20) + " MiB";
  if (b >= (1 << 10)) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

}  // namespace

int run_allreduce_worker(const std::string& out, const std::vector<std::int64_t>& sizes, bool flat) {
  auto pg = join(!flat);
  const int n = pg->size();
  std::ofstream f;
  if (pg->rank() == 0) f.open(out);
  for (auto bytes : sizes) {
    check_all_reduce(*pg, bytes / 4);
    auto t = torch::ones({bytes / 4}, torch::kFloat);
    const int iters = static_cast<int>(std::clamp<std::int64_t>((std::int64_t(512) << 20) / bytes, 5, 2000));
    for (int i = 0; i < std::max(3, iters / 10); ++i) pg->all_reduce(t);
    pg->barrier();
    std::vector<double> per;
    for (int i = 0; i < iters; ++i) {
      if (failpoint("bench.allreduce.crash")) ::raise(SIGKILL);  // tests: a rank dying between collectives
      const auto s = Clock::now();
      if (failpoint("bench.allreduce.mismatch")) pg->broadcast(t, 0);  // tests: a rank calling another collective
      else pg->all_reduce(t);
      per.push_back(since(s));
    }
    std::sort(per.begin(), per.end());
    const double median = max_over_ranks(*pg, per[per.size() / 2]);
    const double lo = max_over_ranks(*pg, per.front()), hi = max_over_ranks(*pg, per.back());
    const double alg = bytes / median / 1e9;
    if (f)
      f << pg->transport() << ',' << n << ',' << bytes << ',' << iters << ',' << median * 1e6 << ',' << alg << ','
        << alg * 2 * (n - 1) / n << ',' << lo * 1e6 << ',' << hi * 1e6 << '\n';
  }
  return 0;
}

int run_allreduce_bench(const AllreduceBenchOptions& o) {
  std::ofstream csv = open_csv(o.csv);
  csv << "security,transport,ranks,bytes,iters,median_us,algbw_GBps,busbw_GBps,min_us,max_us\n";
  std::cout
      << "all_reduce(SUM, float32), the zmq process group over shared memory (shm) or its sockets (zmq); time\n"
         "per call: median of the timed calls, with the fastest and slowest (min / max), each the slowest rank's;\n"
         "sizes run in the order given\n"
      << machine_description() << "\n\n"
      << "| security | transport | ranks | size | calls | time per call | min / max | algbw GB/s | busbw GB/s |\n"
         "|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  std::vector<std::string> args;
  for (auto s : o.sizes) args.push_back(std::to_string(s));
  for (int ranks : o.ranks)
    for (const auto& security : o.security)
      for (const auto& transport : o.transports)
        for (const auto& line : run_workers(ranks, "allreduce-worker", args, security, transport)) {
          auto c = fields(line, 9, "allreduce-worker");
          csv << security << ',' << line << '\n';
          std::cout << "| " << security << " | " << c[0] << " | " << c[1] << " | " << human_bytes(std::stoll(c[2]))
                    << " | " << c[3] << " | " << std::fixed << std::setprecision(1) << std::stod(c[4]) << " µs | "
                    << std::stod(c[7]) << " / " << std::stod(c[8]) << " µs | " << std::setprecision(2)
                    << std::stod(c[5]) << " | " << std::stod(c[6]) << " |\n";
        }
  std::cout << "\nwrote " << o.csv << "\n";
  return 0;
}

int run_ddp_worker(const std::string& out, const std::string& model, int steps, int batch, double bucket_mb) {
  auto pg = join();
  models::set_torch_threads(1);  // OpenBLAS's threads too: spinning ones steal the other rank's vCPU
  torch::manual_seed(1);
  models::NetSpec spec;
  spec.name = model;
  spec.hidden = {1024, 1024, 1024};
  auto net = models::make_net(spec);
  training::DdpOptions dopt;
  dopt.bucket_cap_mb = bucket_mb;
  training::DistributedDataParallel ddp(net, pg, dopt);
  torch::optim::SGD opt(net->parameters(), 0.01);
  auto x = torch::randn({batch, 1, 28, 28});
  auto y = torch::randint(0, 10, {batch}, torch::kLong);
  double backward = 0;
  auto step = [&] {
    auto loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  auto timed = [&](bool sync) {
    pg->barrier();
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) {
      if (sync) {
        step();
        backward += ddp.last_stats().backward_s;
      } else {
        auto guard = ddp.no_sync();
        step();
      }
    }
    return max_over_ranks(*pg, since(start)) / steps;
  };
  for (int i = 0; i < 3; ++i) step();
  const double with_comm = timed(true);
  const double local = timed(false);  // the same steps, same processes, no communication
  // The same buckets all-reduced with nothing else running: the communication to hide.
  std::vector<torch::Tensor> flats;
  auto params = net->parameters();
  for (const auto& b : ddp.buckets()) {
    std::int64_t numel = 0;
    for (int i : b) numel += params[i].numel();
    flats.push_back(torch::zeros({numel}));
  }
  pg->barrier();
  const auto cstart = Clock::now();
  for (int i = 0; i < steps; ++i)
    for (auto& f : flats) pg->all_reduce(f, transport::ReduceOp::Avg);
  const double comm = max_over_ranks(*pg, since(cstart)) / steps;
  const double exposed = with_comm - local;
  const double seconds = with_comm * steps;
  if (pg->rank() == 0) {
    std::ofstream f(out);
    // Not clamped: below 0 the communication cost more than the all-reduce alone (it slowed
    // backward down); above 1 no_sync was slower than DDP (noise).
    const double hidden = pg->size() > 1 && comm > 0 ? 1 - exposed / comm : 0;
    f << pg->transport() << ',' << model << ',' << pg->size() << ',' << batch << ',' << steps / seconds << ','
      << steps * batch * pg->size() / seconds << ',' << backward / steps * 1e3 << ',' << comm * 1e3 << ','
      << exposed * 1e3 << ',' << hidden << ',' << ddp.buckets().size() << '\n';
  }
  return 0;
}

int run_ddp_bench(const DdpBenchOptions& o) {
  std::ofstream csv = open_csv(o.csv);
  csv << "transport,model,ranks,batch_per_rank,steps_per_s,samples_per_s,backward_ms,comm_ms,exposed_comm_ms,"
         "hidden_fraction,buckets\n";
  std::cout
      << "DDP training steps (SGD, batch " << o.batch << " per rank, bucket cap " << o.bucket_mb
      << " MiB, 1 LibTorch thread per rank); collectives over shared memory (shm) or ZeroMQ sockets (zmq)\n"
      << machine_description() << "\n\n"
      << "exposed = step time with DDP - step time of the same processes under no_sync; hidden = 1 - exposed / "
         "(the buckets all-reduced alone)\n\n"
      << "| model | transport | ranks | buckets | steps/s | samples/s | backward ms | all-reduce alone ms | exposed ms "
         "| comm hidden |\n"
      << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& model : o.models)
    for (int ranks : o.ranks)
      for (const auto& transport : o.transports) {
        if (ranks == 1 && transport != o.transports.front()) continue;  // one rank: no collectives to compare
        const std::vector<std::string> args{model, std::to_string(o.steps), std::to_string(o.batch),
                                            std::to_string(o.bucket_mb)};
        for (const auto& line : run_workers(ranks, "ddp-worker", args, "off", transport)) {
          auto c = fields(line, 11, "ddp-worker");
          csv << line << '\n';
          std::cout << std::fixed << "| " << c[1] << (c[1] == "mlp" ? " 3x1024" : "") << " | "
                    << (c[2] == "1" ? std::string("-") : c[0]) << " | " << c[2] << " | " << c[10] << " | "
                    << std::setprecision(1) << std::stod(c[4]) << " | " << std::setprecision(0) << std::stod(c[5])
                    << " | " << std::setprecision(1) << std::stod(c[6]) << " | " << std::stod(c[7]) << " | "
                    << std::stod(c[8]) << " | "
                    << (c[2] == "1" ? std::string("-")
                                    : std::to_string(static_cast<int>(std::lround(std::stod(c[9]) * 100))) + " %")
                    << " |\n";
        }
      }
  std::cout << "\nwrote " << o.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
