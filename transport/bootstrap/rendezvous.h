// Init methods, like torch.distributed: env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK, or the SLURM / Open MPI equivalents), tcp://host:port and file:///path.
// Rank 0 hosts the key-value store, unless DISTRL_STORE_HOSTED=1 says another process already
// serves it at MASTER_ADDR:MASTER_PORT (distrl-launch does, so that any rank, rank 0 too, can
// die and be restarted: the store and what the world wrote there outlive it). Every rank gets a
// client to the store.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transport/bootstrap/store.h"

namespace distrl::transport {

struct WorldSpec {
  std::string method;  // "env", "tcp" or "file"
  int rank = -1;
  int world_size = -1;
  int local_rank = 0;
  std::string master_addr;    // env/tcp
  int master_port = 0;        // env/tcp
  std::string file_path;      // file
  bool store_hosted = false;  // env/tcp: DISTRL_STORE_HOSTED=1, the store already runs elsewhere
  std::string source;         // where rank and world came from (transport/bootstrap/cluster_env.h); empty: passed in
};

// Resolves an init method with explicit rank/world_size (-1: from the environment the launcher
// set: torchrun, distrl-launch, PyTorchJob, srun, TrainJob, mpirun; transport/bootstrap/cluster_env.h).
// Throws ConfigError naming the missing or bad variable and how to fix it.
WorldSpec resolve_world(const std::string& init_method, int rank, int world_size);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);
// The local address the OS would use to reach host (no packet is sent); "127.0.0.1" for loopback.
std::string local_address_towards(const std::string& host);

// Removes the ipc socket files process `pid` of this host bound (/tmp/distrl-<pid>-*.ipc, and
// its shared-memory sockets in /tmp/distrl-u<uid>/).
// Every process removes its own when it shuts down; one that was killed cannot, so whoever
// started it calls this once it has exited (distrl-launch, the tests' run_ranks).
void remove_ipc_files_of(int pid);

// The store connection of one process; rank 0 also runs the server.
class Rendezvous {
 public:
  Rendezvous(const WorldSpec& world, std::chrono::milliseconds timeout);
  ~Rendezvous();
  const WorldSpec& world() const { return world_; }
  Store& store() { return *store_; }

 private:
  WorldSpec world_;
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<Store> store_;
};

}  // namespace distrl::transport
