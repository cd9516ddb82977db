#include "transport/bootstrap/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "transport/bootstrap/cluster_env.h"

namespace distrl::transport {
namespace {

int parse_int(const std::string& text, const std::string& what, int lo, int hi) {
  try {
    std::size_t pos = 0;
    long v = std::stol(text, &pos);
    if (pos != text.size() || v < lo || v > hi) throw std::out_of_range("");
    return static_cast<int>(v);
  } catch (const std::exception&) {
    throw ConfigError("rendezvous: " + what + " is '" + text + "', expected an integer in [" + std::to_string(lo) +
                      ", " + std::to_string(hi) + "]");
  }
}

}  // namespace

bool is_loopback(const std::string& host) { return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0; }

std::string local_address_towards(const std::string& host) {
  if (is_loopback(host)) return "127.0.0.1";
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res)
    throw ConfigError("rendezvous: cannot resolve master address '" + host + "'");
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  std::string out = "127.0.0.1";
  // connect() on a UDP socket only picks a route and a source address.
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)))
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return out;
}

WorldSpec resolve_world(const std::string& init_method, int rank, int world_size) {
  WorldSpec w;
  const bool env_method = init_method == "env://" || init_method.empty();
  // The launcher's variables (torchrun, distrl-launch, PyTorchJob, srun, TrainJob, mpirun), read
  // only when something is to come from them.
  ClusterEnv cluster;
  if (rank < 0 || world_size < 1 || env_method) cluster = read_cluster_env();
  w.rank = rank >= 0 ? rank : cluster.rank;
  w.world_size = world_size > 0 ? world_size : cluster.world_size;
  w.local_rank = std::max(0, cluster.local_rank);
  w.source = cluster.source;
  if (w.rank < 0 && cluster.source == "trainjob")
    throw ConfigError(
        "rendezvous: TrainJob runs " +
        (cluster.local_world_size > 1 ? std::to_string(cluster.local_world_size) : std::string("several")) +
        " ranks per node (PET_NPROC_PER_NODE): start them with distrl-launch on each node (it reads "
        "PET_*), or set RANK and WORLD_SIZE per rank");
  if (w.rank < 0)
    throw ConfigError(
        "rendezvous: rank unknown: set RANK (or run under distrl-launch, torchrun, srun or mpirun), or "
        "pass a rank");
  if (w.world_size < 1)
    throw ConfigError(
        "rendezvous: world size unknown: set WORLD_SIZE (or run under distrl-launch, torchrun, srun or "
        "mpirun), or pass a world size");
  if (w.rank >= w.world_size)
    throw ConfigError("rendezvous: rank " + std::to_string(w.rank) + " is not below world size " +
                      std::to_string(w.world_size));

  if (env_method) {
    w.method = "env";
    w.master_addr = cluster.master_addr.empty() ? "127.0.0.1" : cluster.master_addr;
    if (cluster.master_port == 0)
      throw ConfigError(
          "rendezvous: env:// needs MASTER_PORT (and MASTER_ADDR on more than one host); "
          "distrl-launch and torchrun set both, under srun the job id gives the port");
    w.master_port = cluster.master_port;
  } else if (init_method.rfind("tcp://", 0) == 0) {
    w.method = "tcp";
    std::string rest = init_method.substr(6);
    auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw ConfigError("rendezvous: init method '" + init_method + "' must look like tcp://host:port");
    w.master_addr = rest.substr(0, colon);
    if (w.master_addr.size() > 2 && w.master_addr.front() == '[' && w.master_addr.back() == ']')
      w.master_addr = w.master_addr.substr(1, w.master_addr.size() - 2);
    w.master_port = parse_int(rest.substr(colon + 1), "port of " + init_method, 1, 65535);
  }
  if (w.method == "env" || w.method == "tcp") {
    const char* hosted = std::getenv("DISTRL_STORE_HOSTED");
    w.store_hosted = hosted && std::string(hosted) == "1";
  } else if (init_method.rfind("file://", 0) == 0) {
    w.method = "file";
    w.file_path = init_method.substr(7);
    if (w.file_path.empty() || w.file_path[0] != '/')
      throw ConfigError("rendezvous: init method '" + init_method + "' must be file:///absolute/path");
  } else {
    throw ConfigError("rendezvous: unknown init method '" + init_method +
                      "' (use env://, tcp://host:port or file:///path)");
  }
  return w;
}

Rendezvous::Rendezvous(const WorldSpec& world, std::chrono::milliseconds timeout) : world_(world) {
  using Clock = std::chrono::steady_clock;
  if (world.method == "file") {
    if (world.rank == 0) {
      server_ = std::make_unique<StoreServer>("tcp://127.0.0.1:*", StoreLimits::from_env());
      // Write-then-rename so readers never see half a line.
      const std::string tmp = world.file_path + ".tmp" + std::to_string(::getpid());
      {
        std::ofstream f(tmp, std::ios::trunc);
        f << server_->endpoint() << "\n";
        if (!f) throw TransportError("rendezvous: cannot write " + tmp);
      }
      if (std::rename(tmp.c_str(), world.file_path.c_str()) != 0)
        throw TransportError("rendezvous: cannot rename " + tmp + " to " + world.file_path);
      store_ = std::make_unique<Store>(server_->endpoint(), timeout);
      return;
    }
    // A stale file from an earlier run may name a dead store: re-read until one answers.
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::ifstream f(world.file_path);
      std::string endpoint;
      if (f && std::getline(f, endpoint) && !endpoint.empty()) {
        auto s = std::make_unique<Store>(endpoint, timeout);
        if (s->ping(std::chrono::milliseconds(500))) {
          store_ = std::move(s);
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw TimeoutError("rendezvous: no store found through " + world.file_path + " within " +
                       std::to_string(timeout.count()) + " ms (is rank 0 running with the same file?)");
  }
  const std::string port = std::to_string(world.master_port);
  if (world.rank == 0 && !world.store_hosted) {
    const std::string host = is_loopback(world.master_addr) ? "127.0.0.1" : "*";
    server_ = std::make_unique<StoreServer>("tcp://" + host + ":" + port, StoreLimits::from_env());
  }
  const std::string addr =
      world.master_addr.find(':') != std::string::npos ? "[" + world.master_addr + "]" : world.master_addr;
  store_ = std::make_unique<Store>("tcp://" + addr + ":" + port, timeout);
}

Rendezvous::~Rendezvous() = default;

}  // namespace distrl::transport
