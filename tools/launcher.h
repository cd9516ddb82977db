// distrl-launch's engine: starts N local ranks of a command with the rendezvous variables set
// (like torchrun on one node), prefixes each output line with the rank, and stops every rank
// when one fails (or restarts it, with max_restarts). The launcher of node 0 hosts the
// rendezvous store itself (DISTRL_STORE_HOSTED=1 tells the ranks), so the store outlives any
// rank. Single-threaded apart from the store's thread; blocks until all ranks have exited.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace distrl::tools {

struct LaunchOptions {
  int nproc = 1;      // ranks on this node
  int nnodes = 1;     // nodes in the job
  int node_rank = 0;  // this node's index
  // Nodes of different sizes (a config's world split over --nnodes): the world's size and this
  // node's first global rank. 0 / -1: every node runs nproc ranks, node k from k * nproc.
  int world_size = 0;
  int first_rank = -1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                     // 0: pick a free port (single node only)
  bool prefix = true;                      // "[rank] " before each line
  std::chrono::milliseconds grace{30000};  // SIGTERM -> SIGKILL delay when stopping ranks
  std::vector<std::string> command;
  // Global ranks that run another command than `command` (an RL world: rank 0 the agent, the
  // last rank the learner with roles.learners 1, the observers between).
  std::map<int, std::vector<std::string>> rank_commands;
  // A rank that exits with an error or is killed is started again, up to this many times per
  // rank (0: the first failure stops the job). The new process rejoins the running world under
  // the same rank (RpcAgent); the others are not restarted.
  int max_restarts = 0;
  // Global ranks whose failure (not restarted) does not stop the run: the launcher says so, marks
  // the rank gone in the store (transport::dead_rank_key) so that the others' graceful shutdown
  // does not wait for it, and the run goes on. For ranks whose peers cope without them (an RL
  // run's observers, and its agents when several feed one learner process).
  std::set<int> expendable;
  // "curve": every socket of the world (the store here, every rank's) uses ZeroMQ CURVE with the
  // key in security_key, or with a key made for this run (prepare_security). Empty means "off".
  std::string security;
  std::string security_key;
  std::string made_key;  // the key file prepare_security made; the caller removes it at the end
  // --config: what the tool's --check-config said ("distrl-agent: ok: ..."), and the run's
  // run.out_dir, which node 0's launcher claims for the run (common/run_lock.h).
  std::string checked;
  std::string out_dir;
};

// Applies o->security before anything starts: with "curve", reads (or makes, one node only) the
// world key and exports DISTRL_CURVE_KEY so that this process's store, the configuration checks
// and every rank use it. Warns when a multi-node world runs without security. Throws ConfigError.
void prepare_security(LaunchOptions* o);

// Returns 0 when every rank exited 0, else the first failure's exit code (128 + signal for a
// signal). Throws distrl::ConfigError for bad options. prepare_security must have run.
int launch(const LaunchOptions& options);

// Runs argv (argv[0] a path) to completion; its stdout and stderr go to output_path when one is
// given. Returns its exit code (128 + signal for a signal; 127 when it cannot be started).
int run_process(const std::vector<std::string>& argv, const std::string& output_path = "");
// The same in two halves: start_process returns the child's pid at once; wait_process returns
// its exit code, waiting for it when `block`, else -1 while it still runs.
pid_t start_process(const std::vector<std::string>& argv, const std::string& output_path = "");
int wait_process(pid_t pid, bool block = true);

// A TCP port that was free a moment ago on addr.
int free_port(const std::string& addr);

}  // namespace distrl::tools
