// distrl-bench rpc: the transport's round trip, throughput and bandwidth between two processes.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "tools/bench.h"
#include "transport/rpc/rpc_agent.h"

namespace distrl::tools {
namespace {

using namespace transport;
using Clock = std::chrono::steady_clock;

struct Result {
  std::string transport;
  double median_us = 0, p99_us = 0, calls_per_s = 0, big_gbps = 0;
};

void pin(const std::string& cpus, int rank) {
  if (cpus == "any") return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus == "same" ? 0 : rank % std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))), &set);
  sched_setaffinity(0, sizeof(set), &set);
}

Result client(RpcAgent& agent, const RpcBenchOptions& o) {
  Result r;
  const at::Tensor small = torch::rand({1, 4});
  for (int i = 0; i < o.warmup; ++i) agent.rpc_sync<at::Tensor>(1, "echo", small);
  std::vector<double> us(o.calls);
  for (int i = 0; i < o.calls; ++i) {
    auto t0 = Clock::now();
    agent.rpc_sync<at::Tensor>(1, "echo", small);
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  r.median_us = percentile(us, 0.5);
  r.p99_us = percentile(us, 0.99);

  std::vector<Future<at::Tensor>> window(o.inflight);
  auto t0 = Clock::now();
  for (int i = 0; i < o.throughput_calls; ++i) {
    auto& slot = window[i % o.inflight];
    if (slot.valid()) slot.value();
    slot = agent.rpc_async<at::Tensor>(1, "echo", small);
  }
  for (auto& f : window)
    if (f.valid()) f.value();
  r.calls_per_s = o.throughput_calls / std::chrono::duration<double>(Clock::now() - t0).count();

  const at::Tensor big = torch::rand({static_cast<std::int64_t>(o.big_mib) << 18});  // MiB of float32
  agent.rpc_sync<at::Tensor>(1, "echo", big);
  t0 = Clock::now();
  for (int i = 0; i < o.big_iters; ++i) agent.rpc_sync<at::Tensor>(1, "echo", big);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  r.big_gbps = 2.0 * big.nbytes() * o.big_iters / secs / 1e9;  // both directions
  return r;
}

// Runs server (rank 1) and client (rank 0) as two processes; the client writes its result.
Result run_pair(const RpcBenchOptions& o, const std::string& transport) {
  const auto dir = std::filesystem::temp_directory_path() / ("distrl-bench-" + std::to_string(::getpid()) + "-" + transport);
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "result").string();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    pid_t pid = ::fork();
    if (pid != 0) {
      pids.push_back(pid);
      continue;
    }
    int code = 0;
    try {
      pin(o.cpus, rank);
      torch::set_num_threads(1);
      if (o.spin_us >= 0) set_future_spin(std::chrono::microseconds(o.spin_us));
      RpcOptions ro;
      ro.init_method = "file://" + (dir / "rendezvous").string();
      ro.rank = rank;
      ro.world_size = 2;
      ro.transport = transport;
      ro.num_worker_threads = 2;
      if (o.spin_us >= 0) ro.io_spin = std::chrono::microseconds(o.spin_us);
      RpcAgent agent(ro, [](RpcAgent& a) { a.register_function("echo", [](at::Tensor t) { return t; }); });
      if (rank == 0) {
        Result r = client(agent, o);
        std::ofstream f(out);
        f << r.median_us << " " << r.p99_us << " " << r.calls_per_s << " " << r.big_gbps << "\n";
      }
      agent.shutdown();
    } catch (const std::exception& e) {
      std::cerr << "bench rank " << rank << ": " << e.what() << "\n";
      code = 1;
    }
    ::_exit(code);
  }
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  Result r;
  r.transport = transport;
  std::ifstream f(out);
  if (!ok || !(f >> r.median_us >> r.p99_us >> r.calls_per_s >> r.big_gbps))
    throw Error("rpc: the " + transport + " run failed (see its output above)");
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace

std::string machine_description() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return model + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " vCPUs";
}

int run_rpc_bench(const RpcBenchOptions& o) {
  std::vector<Result> results;
  for (auto& t : o.transports) results.push_back(run_pair(o, t));
  std::cout << "distrl-bench rpc on " << machine_description() << "; processes on cpus: " << o.cpus << "\n"
            << "  rpc_sync: " << o.calls << " calls with a [1,4] float32 tensor; rpc_async: " << o.throughput_calls
            << " calls, " << o.inflight << " in flight; " << o.big_mib << " MiB tensor echoed " << o.big_iters << " times\n\n";
  std::cout << std::left << std::setw(10) << "transport" << std::right << std::setw(14) << "median us" << std::setw(12)
            << "p99 us" << std::setw(16) << "async calls/s" << std::setw(16) << (std::to_string(o.big_mib) + "MiB GB/s") << "\n";
  std::ofstream csv(o.csv);
  csv << "transport,cpus,median_us,p99_us,async_calls_per_s,inflight,big_mib,big_gbps\n";
  for (auto& r : results) {
    std::cout << std::left << std::setw(10) << r.transport << std::right << std::fixed << std::setprecision(1)
              << std::setw(14) << r.median_us << std::setw(12) << r.p99_us << std::setw(16) << std::setprecision(0)
              << r.calls_per_s << std::setw(16) << std::setprecision(2) << r.big_gbps << "\n";
    csv << r.transport << "," << o.cpus << "," << r.median_us << "," << r.p99_us << "," << r.calls_per_s << ","
        << o.inflight << "," << o.big_mib << "," << r.big_gbps << "\n";
  }
  std::cout << "\nwrote " << o.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
