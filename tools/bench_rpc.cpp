// distrl-bench rpc: the transport's round trip, throughput and bandwidth between two processes.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/cpu_time.h"
#include "tools/bench.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/bootstrap/security.h"
#include "transport/bootstrap/store.h"
#include "transport/link/shm/ring_pair.h"
#include "transport/wire/tensor.h"

namespace distrl::tools {
namespace {

using namespace transport;
using Clock = std::chrono::steady_clock;

struct Result {
  std::string transport, security;
  double median_us = 0, p99_us = 0, calls_per_s = 0, big_gbps = 0;
  double pool_calls_per_s = 0;                   // rpc_async in flight to a handler on the server's pool (RunOn::Pool)
  double client_cpu_us = 0, server_cpu_us = 0;   // CPU time per rpc_sync call, each process
  double floor_median_us = 0, floor_p99_us = 0;  // plain libzmq ping-pong, same sizes and placement
  double floor_client_cpu_us = 0, floor_server_cpu_us = 0;
  double loop_median_us = 0, loop_p99_us = 0;  // rpc_async(...).value(): through both I/O loops
  double loop_client_cpu_us = 0, loop_server_cpu_us = 0;
  // The shared-memory floor (same sizes, same processes): futex only, then with a spin.
  double shm_median_us[2] = {0, 0}, shm_p99_us[2] = {0, 0}, shm_client_cpu_us[2] = {0, 0},
         shm_server_cpu_us[2] = {0, 0};
};

// The floor: a libzmq DEALER/ROUTER ping-pong of two frames (an RPC header's size and the
// [1,4] float32 tensor's 16 bytes), nothing else: libzmq's own I/O threads are the only hops.
// The server answers "cpu" with its CPU time so far.
constexpr std::size_t kFloorHeader = 64, kFloorBody = 16;

void floor_server(const std::string& endpoint_file, const std::string& transport, const std::string& dir) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind(transport != "tcp" ? "ipc://" + dir + "/floor.ipc" : "tcp://127.0.0.1:*");
  { std::ofstream(endpoint_file + ".tmp") << router.get(zmq::sockopt::last_endpoint); }
  std::filesystem::rename(endpoint_file + ".tmp", endpoint_file);
  for (;;) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(router, std::back_inserter(parts))) continue;
    if (parts.size() == 2) {  // [id, "cpu" | "bye"]
      const std::string what = parts[1].to_string();
      const std::string cpu = std::to_string(process_cpu_us());
      router.send(parts[0], zmq::send_flags::sndmore);
      router.send(zmq::buffer(cpu), zmq::send_flags::none);
      if (what == "bye") return;
      continue;
    }
    zmq::send_multipart(router, parts);
  }
}

void floor_client(const std::string& endpoint_file, const RpcBenchOptions& o, Result* r) {
  std::string endpoint;
  for (int i = 0; i < 10000 && endpoint.empty(); ++i) {
    std::ifstream f(endpoint_file);
    std::getline(f, endpoint);
    if (endpoint.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (endpoint.empty()) throw Error("rpc floor: the ping-pong server never published its endpoint");
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  const std::string header(kFloorHeader, 'h'), body(kFloorBody, 'b');
  auto ping = [&] {
    dealer.send(zmq::buffer(header), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(body), zmq::send_flags::none);
    std::vector<zmq::message_t> reply;
    (void)zmq::recv_multipart(dealer, std::back_inserter(reply));
  };
  auto server_cpu = [&](const char* what) {
    dealer.send(zmq::buffer(std::string(what)), zmq::send_flags::none);
    zmq::message_t m;
    (void)dealer.recv(m);
    return std::stod(m.to_string());
  };
  for (int i = 0; i < o.warmup; ++i) ping();
  std::vector<double> us(o.calls);
  const double s0 = server_cpu("cpu"), c0 = process_cpu_us();
  for (int i = 0; i < o.calls; ++i) {
    auto t0 = Clock::now();
    ping();
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  r->floor_client_cpu_us = (process_cpu_us() - c0) / o.calls;
  r->floor_server_cpu_us = (server_cpu("bye") - s0) / o.calls;
  r->floor_median_us = percentile(us, 0.5);
  r->floor_p99_us = percentile(us, 0.99);
}

// The shared-memory floor: the same two frames ping-ponged over a ring pair (transport/link/shm), the
// waiting side sleeping on a futex at once (session 0) or after spinning up to kShmSpins[1]
// (session 1): what a round trip between these processes costs without any socket.
constexpr std::chrono::microseconds kShmSpins[2] = {std::chrono::microseconds(0), std::chrono::microseconds(20)};
constexpr std::size_t kShmRing = 1 << 16;

void shm_floor_server(const std::string& path) {
  using namespace transport::detail;
  UnixSocket listener = UnixSocket::listen(path);
  for (const auto spin_max : kShmSpins) {
    RingPair p = accept_ring_pair(listener, "the floor client", Clock::now() + std::chrono::seconds(30));
    MessageDecoder decoder(8, 1 << 20);
    MessageWriter writer;
    Spinner spin(spin_max);
    for (bool done = false; !done;) {
      Frames m;
      if (!decoder.read(p.in, m, Clock::now() + std::chrono::seconds(30), spin))
        throw Error("rpc shm floor: the client sent nothing for 30 s");
      if (m.size() == 1) {  // "cpu" | "bye"
        done = m[0].to_string() == "bye";
        const std::string cpu = std::to_string(process_cpu_us());
        m[0] = Frame(cpu.data(), cpu.size());
      }
      writer.write(p.out, std::move(m), Clock::now() + std::chrono::seconds(30), spin);
    }
  }
}

void shm_floor_client(const std::string& path, const RpcBenchOptions& o, Result* r) {
  using namespace transport::detail;
  for (int session = 0; session < 2; ++session) {
    RingPair p = connect_ring_pair(path, kShmRing, "the floor server", Clock::now() + std::chrono::seconds(30));
    MessageDecoder decoder(8, 1 << 20);
    MessageWriter writer;
    Spinner spin(kShmSpins[session]);
    const std::string header(kFloorHeader, 'h'), body(kFloorBody, 'b');
    const auto deadline = [] { return Clock::now() + std::chrono::seconds(30); };
    auto exchange = [&](std::vector<std::string> parts) {
      Frames m;
      for (auto& part : parts) m.emplace_back(part.data(), part.size());
      writer.write(p.out, std::move(m), deadline(), spin);
      Frames reply;
      if (!decoder.read(p.in, reply, deadline(), spin)) throw Error("rpc shm floor: no answer for 30 s");
      return reply;
    };
    auto server_cpu = [&](const char* what) { return std::stod(exchange({what}).at(0).to_string()); };
    for (int i = 0; i < o.warmup; ++i) exchange({header, body});
    std::vector<double> us(o.calls);
    const double s0 = server_cpu("cpu"), c0 = process_cpu_us();
    for (int i = 0; i < o.calls; ++i) {
      auto t0 = Clock::now();
      exchange({header, body});
      us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    }
    r->shm_client_cpu_us[session] = (process_cpu_us() - c0) / o.calls;
    r->shm_server_cpu_us[session] = (server_cpu("bye") - s0) / o.calls;
    r->shm_median_us[session] = percentile(us, 0.5);
    r->shm_p99_us[session] = percentile(us, 0.99);
  }
}

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
  const double s0 = agent.rpc_sync<double>(1, "cpu_us"), c0 = process_cpu_us();
  for (int i = 0; i < o.calls; ++i) {
    auto t0 = Clock::now();
    agent.rpc_sync<at::Tensor>(1, "echo", small);
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  r.client_cpu_us = (process_cpu_us() - c0) / o.calls;
  r.server_cpu_us = (agent.rpc_sync<double>(1, "cpu_us") - s0) / o.calls;
  r.median_us = percentile(us, 0.5);
  r.p99_us = percentile(us, 0.99);

  // The same calls as a future waited on: what rpc_sync was before its fast path.
  const double s1 = agent.rpc_sync<double>(1, "cpu_us"), c1 = process_cpu_us();
  for (int i = 0; i < o.calls; ++i) {
    auto t0 = Clock::now();
    agent.rpc_async<at::Tensor>(1, "echo", small).value();
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  r.loop_client_cpu_us = (process_cpu_us() - c1) / o.calls;
  r.loop_server_cpu_us = (agent.rpc_sync<double>(1, "cpu_us") - s1) / o.calls;
  r.loop_median_us = percentile(us, 0.5);
  r.loop_p99_us = percentile(us, 0.99);

  // rpc_async calls/s with o.inflight in flight, to fn.
  const auto throughput = [&](const char* fn) {
    std::vector<Future<at::Tensor>> window(o.inflight);
    const auto t0 = Clock::now();
    for (int i = 0; i < o.throughput_calls; ++i) {
      auto& slot = window[i % o.inflight];
      if (slot.valid()) slot.value();
      slot = agent.rpc_async<at::Tensor>(1, fn, small);
    }
    for (auto& f : window)
      if (f.valid()) f.value();
    return o.throughput_calls / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  r.calls_per_s = throughput("echo");
  r.pool_calls_per_s = throughput("echo_pool");
  auto t0 = Clock::now();

  const at::Tensor big = torch::rand({static_cast<std::int64_t>(o.big_mib) << 18});  // MiB of float32
  agent.rpc_sync<at::Tensor>(1, "echo", big);
  t0 = Clock::now();
  for (int i = 0; i < o.big_iters; ++i) agent.rpc_sync<at::Tensor>(1, "echo", big);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  r.big_gbps = 2.0 * big.nbytes() * o.big_iters / secs / 1e9;  // both directions
  return r;
}

// Forks one process per rank to run body(rank) (an exception: printed, exit 1) and waits for
// them all; true when every one exited 0.
bool run_forked(int ranks, const std::string& what, const std::function<void(int)>& body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < ranks; ++rank) {
    const pid_t pid = ::fork();
    if (pid != 0) {
      pids.push_back(pid);
      continue;
    }
    int code = 0;
    try {
      body(rank);
    } catch (const std::exception& e) {
      std::cerr << what << " rank " << rank << ": " << e.what() << "\n";
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
  return ok;
}

// Runs server (rank 1) and client (rank 0) as two processes; the client writes its result.
Result run_pair(const RpcBenchOptions& o, const std::string& transport, const std::string& security) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("distrl-bench-" + std::to_string(::getpid()) + "-" + transport + "-" + security);
  const WorldKey key = generate_world_key();  // before the fork: no ZeroMQ context in this process
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "result").string();
  const bool ok = run_forked(2, "bench", [&](int rank) {
    pin(o.cpus, rank);
    if (security == "curve") use_curve(key);  // the RPC sockets; the libzmq floor stays plain
    torch::set_num_threads(1);
    if (o.spin_us >= 0) set_future_spin(std::chrono::microseconds(o.spin_us));
    RpcOptions ro;
    ro.init_method = "file://" + (dir / "rendezvous").string();
    ro.rank = rank;
    ro.world_size = 2;
    ro.transport = transport;
    ro.num_worker_threads = 2;
    if (o.spin_us >= 0) ro.io_spin = std::chrono::microseconds(o.spin_us);
    const std::string floor_endpoint = (dir / "floor-endpoint").string();
    const std::string shm_path = (dir / "shm-floor.sock").string();
    Result r;
    if (rank == 1) {
      floor_server(floor_endpoint, transport, dir.string());  // first the floors, same processes
      shm_floor_server(shm_path);
    } else {
      floor_client(floor_endpoint, o, &r);
      shm_floor_client(shm_path, o, &r);
    }
    RpcAgent agent(ro, [](RpcAgent& a) {
      a.register_function(
          "echo", [](at::Tensor t) { return t; }, RunOn::IoThread);      // returns at once
      a.register_function("echo_pool", [](at::Tensor t) { return t; });  // on the handler pool
      a.register_function("cpu_us", [] { return process_cpu_us(); });
    });
    if (rank == 0) {
      Result rr = client(agent, o);
      std::ofstream f(out);
      f << rr.median_us << " " << rr.p99_us << " " << rr.calls_per_s << " " << rr.big_gbps << " " << rr.client_cpu_us
        << " " << rr.server_cpu_us << " " << r.floor_median_us << " " << r.floor_p99_us << " " << r.floor_client_cpu_us
        << " " << r.floor_server_cpu_us << " " << rr.loop_median_us << " " << rr.loop_p99_us << " "
        << rr.loop_client_cpu_us << " " << rr.loop_server_cpu_us << " " << rr.pool_calls_per_s;
      for (int k = 0; k < 2; ++k)
        f << " " << r.shm_median_us[k] << " " << r.shm_p99_us[k] << " " << r.shm_client_cpu_us[k] << " "
          << r.shm_server_cpu_us[k];
      f << "\n";
    }
    agent.shutdown();
  });
  Result r;
  r.transport = transport;
  r.security = security;
  std::ifstream f(out);
  if (!ok ||
      !(f >> r.median_us >> r.p99_us >> r.calls_per_s >> r.big_gbps >> r.client_cpu_us >> r.server_cpu_us >>
        r.floor_median_us >> r.floor_p99_us >> r.floor_client_cpu_us >> r.floor_server_cpu_us >> r.loop_median_us >>
        r.loop_p99_us >> r.loop_client_cpu_us >> r.loop_server_cpu_us >> r.pool_calls_per_s >> r.shm_median_us[0] >>
        r.shm_p99_us[0] >> r.shm_client_cpu_us[0] >> r.shm_server_cpu_us[0] >> r.shm_median_us[1] >> r.shm_p99_us[1] >>
        r.shm_client_cpu_us[1] >> r.shm_server_cpu_us[1]))
    throw Error("rpc: the " + transport + " run (security " + security + ") failed (see its output above)");
  std::filesystem::remove_all(dir);
  return r;
}

// The idle cost: 1 + peers processes, each pair having called each other once (rings or sockets
// set up, heartbeats running), then idle for idle_s; their CPU time in all, as % of one core.
double run_idle_world(const RpcBenchOptions& o, const std::string& transport) {
  const int world = 1 + o.idle_peers;
  const auto dir =
      std::filesystem::temp_directory_path() / ("distrl-bench-idle-" + std::to_string(::getpid()) + "-" + transport);
  std::filesystem::create_directories(dir);
  bool ok = run_forked(world, "idle", [&](int rank) {
    RpcOptions ro;
    ro.init_method = "file://" + (dir / "rendezvous").string();
    ro.rank = rank;
    ro.world_size = world;
    ro.transport = transport;
    ro.num_worker_threads = 2;
    RpcAgent agent(ro, [](RpcAgent& a) { a.register_function("ping", [] { return 1; }); });
    if (rank == 0)  // the agent calls every observer, every observer calls the agent
      for (int r = 1; r < world; ++r) agent.rpc_sync<int>(r, "ping");
    else agent.rpc_sync<int>(0, "ping");
    agent.store().add("idle/ready", 1);
    while (agent.store().add("idle/ready", 0) < world) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // spins after the last call end
    const double c0 = process_cpu_us();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.idle_s));
    std::ofstream((dir / ("cpu-" + std::to_string(rank))).string()) << process_cpu_us() - c0 << "\n";
    agent.shutdown();
  });
  double total_us = 0;
  for (int rank = 0; rank < world && ok; ++rank) {
    double us = 0;
    ok = static_cast<bool>(std::ifstream((dir / ("cpu-" + std::to_string(rank))).string()) >> us);
    total_us += us;
  }
  std::filesystem::remove_all(dir);
  if (!ok) throw Error("rpc: the idle " + transport + " world failed (see its output above)");
  return total_us / 1e6 / o.idle_s * 100;
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
  for (auto& t : o.transports)
    for (auto& sec : o.security) results.push_back(run_pair(o, t, sec));
  std::cout << "distrl-bench rpc on " << machine_description() << "; processes on cpus: " << o.cpus << "\n"
            << "  rpc_sync: " << o.calls << " calls with a [1,4] float32 tensor; rpc_async: " << o.throughput_calls
            << " calls, " << o.inflight << " in flight; " << o.big_mib << " MiB tensor echoed " << o.big_iters
            << " times\n\n";
  std::cout << std::left << std::setw(10) << "transport" << std::setw(9) << "security" << std::setw(12) << "path"
            << std::right << std::setw(11) << "median us" << std::setw(10) << "p99 us" << std::setw(9) << "x floor"
            << std::setw(13) << "cpu us/call" << std::setw(16) << "async calls/s" << std::setw(13)
            << (std::to_string(o.big_mib) + "MiB GB/s") << "\n";
  std::ofstream csv = open_csv(o.csv);
  csv << "transport,security,path,cpus,median_us,p99_us,x_floor,client_cpu_us,server_cpu_us,async_calls_per_s,inflight,"
         "big_mib,"
         "big_gbps,idle_cpu_pct\n";
  for (auto& r : results) {
    const auto row = [&](const char* path, double med, double p99, double ccpu, double scpu, double calls,
                         double gbps) {
      std::cout << std::left << std::setw(10) << r.transport << std::setw(9) << r.security << std::setw(12) << path
                << std::right << std::fixed << std::setprecision(1);
      if (med > 0)  // a row with a round trip
        std::cout << std::setw(11) << med << std::setw(10) << p99 << std::setw(9) << std::setprecision(2)
                  << med / r.floor_median_us << std::setw(13)
                  << (std::to_string(static_cast<int>(ccpu + 0.5)) + "+" +
                      std::to_string(static_cast<int>(scpu + 0.5)));
      else std::cout << std::setw(11) << "-" << std::setw(10) << "-" << std::setw(9) << "-" << std::setw(13) << "-";
      std::cout << std::setw(16) << std::setprecision(0);
      if (calls > 0) std::cout << calls;
      else std::cout << "-";
      std::cout << std::setw(13) << std::setprecision(2);
      if (gbps > 0) std::cout << gbps;
      else std::cout << "-";
      std::cout << "\n";
      csv << r.transport << "," << r.security << "," << path << "," << o.cpus << "," << med << "," << p99 << ","
          << med / r.floor_median_us << "," << ccpu << "," << scpu << "," << calls << "," << o.inflight << ","
          << o.big_mib << "," << gbps << ",\n";
    };
    row("libzmq", r.floor_median_us, r.floor_p99_us, r.floor_client_cpu_us, r.floor_server_cpu_us, 0, 0);
    row("shm-futex", r.shm_median_us[0], r.shm_p99_us[0], r.shm_client_cpu_us[0], r.shm_server_cpu_us[0], 0, 0);
    row("shm-spin", r.shm_median_us[1], r.shm_p99_us[1], r.shm_client_cpu_us[1], r.shm_server_cpu_us[1], 0, 0);
    row("async+wait", r.loop_median_us, r.loop_p99_us, r.loop_client_cpu_us, r.loop_server_cpu_us, 0, 0);
    row("rpc_sync", r.median_us, r.p99_us, r.client_cpu_us, r.server_cpu_us, r.calls_per_s, r.big_gbps);
    row("async pool", 0, 0, 0, 0, r.pool_calls_per_s, 0);
  }
  std::cout
      << "\n  libzmq: the floor, a plain DEALER/ROUTER ping-pong of the same sizes between the same two processes;\n"
         "  shm-futex / shm-spin: the same ping-pong over a shared-memory ring pair (transport/link/shm), the waiting\n"
         "  side sleeping on a futex at once / after spinning up to 20 us: the same-host transport's floor;\n"
         "  async+wait: rpc_async(...).value(), through the caller's I/O loop (rpc_sync before its fast path);\n"
         "  rpc_sync: the fast path (the caller sends and waits on its own channel); the server answers on its\n"
         "  I/O thread (RunOn::IoThread) in both; async calls/s on its row: rpc_async with that many in flight;\n"
         "  async pool: the same rpc_async throughput, the server answering on its handler pool (RunOn::Pool);\n"
         "  security curve: the RPC sockets authenticated and encrypted (ZeroMQ CURVE); the floor stays plain;\n"
         "  x floor: median / the floor's; cpu us/call: client + server CPU time (getrusage) per call.\n";
  if (o.idle_s > 0) {
    std::cout << "\nidle world: 1 + " << o.idle_peers << " processes, every peer and process 0 having called each "
              << "other once, then idle " << o.idle_s << " s; CPU of all of them together:\n";
    for (auto& t : o.transports) {
      const double pct = run_idle_world(o, t);
      std::cout << "  " << std::left << std::setw(10) << t << std::right << std::fixed << std::setprecision(2) << pct
                << " % of one core\n";
      csv << t << ",off,idle-" << o.idle_peers << "-peers," << o.cpus << ",,,,,,,,,," << pct << "\n";
    }
  }
  std::cout << "\nwrote " << o.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
