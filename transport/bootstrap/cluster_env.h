// What the job's launcher says about this process: rank, world size, local rank, node and the
// rendezvous address, read from the environment the common launchers set. LibTorch-free.
//
// Sources, first match wins:
//   torchrun      TORCHELASTIC_RUN_ID set: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                 GROUP_RANK (node), MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
//                 TORCHELASTIC_MAX_RESTARTS
//   env           RANK or WORLD_SIZE set: distrl-launch, Kubeflow's PyTorchJob (MASTER_ADDR,
//                 MASTER_PORT, WORLD_SIZE, RANK), anything torch.distributed's env:// reads
//   slurm         SLURM_PROCID set (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//                 SLURM_NNODES, SLURM_TASKS_PER_NODE ("2(x3),1"), the master the first host of
//                 SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST ("gnode[10,20-22]"), the port
//                 MASTER_PORT, else 20000 + SLURM_JOB_ID % 20000 (the same in every task)
//   trainjob      PET_NNODES set (Kubeflow TrainJob, the variables it gives torchrun): PET_NNODES,
//                 PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; a process
//                 is a rank by itself only with PET_NPROC_PER_NODE=1 (else distrl-launch, one per
//                 node, starts the ranks)
//   mpi           OMPI_COMM_WORLD_RANK / PMI_RANK (with their SIZE and LOCAL_RANK)
// MASTER_ADDR and MASTER_PORT, when set, are the rendezvous address for every source.
//
// Partial or contradictory environments are refused (ConfigError naming the variables and the
// fix): a rank without a world size, a rank outside the world, task counts that do not add up,
// and the known pitfall of platforms that put the node count in WORLD_SIZE while several ranks
// run per node (WORLD_SIZE == PET_NNODES with PET_NPROC_PER_NODE > 1).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace distrl::transport {

struct ClusterEnv {
  std::string source;  // "torchrun", "env", "slurm", "trainjob", "mpi"; empty: none found
  int rank = -1, world_size = -1;
  int local_rank = -1, local_world_size = -1;  // -1: unknown
  int node_rank = -1, nnodes = -1;             // -1: unknown
  std::string master_addr;                     // empty: unknown
  int master_port = 0;                         // 0: unknown
  int restart_count = 0;  // torchrun's TORCHELASTIC_RESTART_COUNT, distrl-launch's DISTRL_RESTART_COUNT
  int max_restarts = -1;  // torchrun's TORCHELASTIC_MAX_RESTARTS
  std::string run_id;     // torchrun's TORCHELASTIC_RUN_ID, SLURM_JOB_ID

  bool found() const { return !source.empty(); }
  // "slurm: rank 3 of 8, local 1 of 2, node 1 of 4, master gnode10:23456"
  std::string describe() const;
};

// getenv, or a stand-in (tests).
using EnvLookup = std::function<const char*(const char* name)>;

// Reads the environment (see above). Throws ConfigError for a partial or contradictory one.
ClusterEnv read_cluster_env(const EnvLookup& env);
ClusterEnv read_cluster_env();  // the process's own environment

// What a per-node launcher (distrl-launch, one per node) takes from the job: the node count,
// this node's index, ranks per node (-1: not said) and the rendezvous address. From Kubeflow
// TrainJob's PET_* or from srun running one task per node (SLURM_NNODES, SLURM_NODEID, the node
// list, the job id); source empty when neither, or when RANK is set (a rank, not a launcher).
struct NodeEnv {
  std::string source;  // "trainjob", "slurm" or empty
  int nnodes = -1, node_rank = -1, nproc_per_node = -1;
  std::string master_addr;
  int master_port = 0;
  bool found() const { return !source.empty(); }
};
NodeEnv read_node_env(const EnvLookup& env);
NodeEnv read_node_env();

// A SLURM node list in its compressed form, expanded: "gnode[10,20-22],login1" -> gnode10,
// gnode20, gnode21, gnode22, login1 (zero padding kept: "n[08-10]" -> n08, n09, n10).
// ConfigError for a malformed list.
std::vector<std::string> expand_slurm_nodelist(const std::string& list);
// SLURM_TASKS_PER_NODE expanded: "2(x3),1" -> 2, 2, 2, 1. ConfigError for a malformed one.
std::vector<int> expand_slurm_tasks_per_node(const std::string& spec);

}  // namespace distrl::transport
