// The launchers' environments, as each sets them: torchrun, distrl-launch / PyTorchJob, srun
// (compressed node lists, tasks per node), Kubeflow TrainJob, mpirun; partial and contradictory
// ones refused naming the variables; and resolve_world reading them from the real environment.
#include "transport/bootstrap/cluster_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "common/error.h"
#include "transport/bootstrap/rendezvous.h"

using namespace distrl::transport;

namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// The ConfigError's text (fails the test when nothing is thrown).
std::string refusal(const Env& env) {
  try {
    read_cluster_env(lookup(env));
  } catch (const distrl::ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Clears every launcher variable, sets env's, and restores what was there.
class ScopedEnv {
 public:
  explicit ScopedEnv(const Env& env) {
    for (const char* k : {"RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE",
                          "GROUP_RANK",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "TORCHELASTIC_RUN_ID",
                          "TORCHELASTIC_RESTART_COUNT",
                          "TORCHELASTIC_MAX_RESTARTS",
                          "DISTRL_RESTART_COUNT",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_NPROCS",
                          "SLURM_LOCALID",
                          "SLURM_NODEID",
                          "SLURM_NNODES",
                          "SLURM_JOB_NUM_NODES",
                          "SLURM_TASKS_PER_NODE",
                          "SLURM_STEP_TASKS_PER_NODE",
                          "SLURM_STEP_NODELIST",
                          "SLURM_JOB_NODELIST",
                          "SLURM_NODELIST",
                          "SLURM_JOB_ID",
                          "SLURM_RESTART_COUNT",
                          "PET_NNODES",
                          "PET_NPROC_PER_NODE",
                          "PET_NODE_RANK",
                          "PET_MASTER_ADDR",
                          "PET_MASTER_PORT",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                          "PMI_RANK",
                          "PMI_SIZE"}) {
      const char* old = std::getenv(k);
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(k);
    }
    for (const auto& [k, v] : env) {
      if (!saved_.count(k)) {
        const char* old = std::getenv(k.c_str());
        saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      }
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

const Env kTorchrun{{"TORCHELASTIC_RUN_ID", "job7"},
                    {"RANK", "5"},
                    {"WORLD_SIZE", "8"},
                    {"LOCAL_RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "4"},
                    {"GROUP_RANK", "1"},
                    {"MASTER_ADDR", "node0"},
                    {"MASTER_PORT", "29500"},
                    {"TORCHELASTIC_RESTART_COUNT", "2"},
                    {"TORCHELASTIC_MAX_RESTARTS", "3"}};

const Env kSlurm{{"SLURM_PROCID", "5"},
                 {"SLURM_NTASKS", "7"},
                 {"SLURM_LOCALID", "1"},
                 {"SLURM_NODEID", "2"},
                 {"SLURM_NNODES", "4"},
                 {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                 {"SLURM_JOB_NODELIST", "big[1-8]"},
                 {"SLURM_STEP_NODELIST", "gnode[10,20-22]"},
                 {"SLURM_JOB_ID", "123456"}};

}  // namespace

TEST(ClusterEnvTest, TorchrunGivesRankWorldLocalNodeMasterAndRestarts) {
  const ClusterEnv c = read_cluster_env(lookup(kTorchrun));
  EXPECT_EQ(c.source, "torchrun");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_world_size, 4);
  EXPECT_EQ(c.node_rank, 1);
  EXPECT_EQ(c.nnodes, 2);
  EXPECT_EQ(c.master_addr, "node0");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_EQ(c.restart_count, 2);  // a restart is an incarnation
  EXPECT_EQ(c.max_restarts, 3);
  EXPECT_EQ(c.run_id, "job7");
  EXPECT_EQ(c.describe(), "torchrun: rank 5 of 8, local 1 of 4, node 1 of 2, master node0:29500, restart 2");
}

TEST(ClusterEnvTest, TorchrunWithoutItsVariablesIsRefusedByName) {
  Env e = kTorchrun;
  e.erase("LOCAL_RANK");
  EXPECT_TRUE(has(refusal(e), "LOCAL_RANK is not set")) << refusal(e);
  e = kTorchrun;
  e.erase("MASTER_PORT");
  EXPECT_TRUE(has(refusal(e), "MASTER_ADDR and MASTER_PORT")) << refusal(e);
  e = kTorchrun;
  e["RANK"] = "8";
  EXPECT_TRUE(has(refusal(e), "RANK=8 is not below WORLD_SIZE=8")) << refusal(e);
  e = kTorchrun;
  e["LOCAL_RANK"] = "x";
  EXPECT_TRUE(has(refusal(e), "LOCAL_RANK is 'x'")) << refusal(e);
}

TEST(ClusterEnvTest, PyTorchJobAndDistrlLaunchSetRankWorldAndMaster) {
  const ClusterEnv c = read_cluster_env(
      lookup({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"}}));
  EXPECT_EQ(c.source, "env");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.local_rank, -1);
  EXPECT_EQ(c.master_addr, "job-master-0");
  EXPECT_EQ(c.master_port, 23456);
  EXPECT_TRUE(has(refusal({{"RANK", "1"}}), "RANK is set but WORLD_SIZE is not")) << refusal({{"RANK", "1"}});
  EXPECT_TRUE(has(refusal({{"WORLD_SIZE", "2"}}), "WORLD_SIZE is set but RANK is not"));
  EXPECT_TRUE(has(refusal({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "99999"}}), "MASTER_PORT is '99999'"));
}

TEST(ClusterEnvTest, NodeCountInWorldSizeIsTheKnownPitfall) {
  const std::string why =
      refusal({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "4"}});
  EXPECT_TRUE(has(why, "counts nodes in WORLD_SIZE") && has(why, "8 ranks") && has(why, "distrl-launch")) << why;
  // One rank per node: WORLD_SIZE == PET_NNODES is right.
  EXPECT_EQ(
      read_cluster_env(lookup({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"PET_NNODES", "2"}, {"PET_NPROC_PER_NODE", "1"}}))
          .world_size,
      2);
}

TEST(ClusterEnvTest, SlurmReadsTheStepNodeListTasksPerNodeAndTheJobsPort) {
  const ClusterEnv c = read_cluster_env(lookup(kSlurm));
  EXPECT_EQ(c.source, "slurm");
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.world_size, 7);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_world_size, 2);  // node 2 of "2(x3),1"
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.nnodes, 4);
  EXPECT_EQ(c.master_addr, "gnode10");  // the step's list before the job's
  EXPECT_EQ(c.master_port, 20000 + 123456 % 20000);
  EXPECT_EQ(c.run_id, "123456");
  Env e = kSlurm;
  e.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(read_cluster_env(lookup(e)).master_addr, "big1");
  e["MASTER_ADDR"] = "10.0.0.9";
  e["MASTER_PORT"] = "4000";
  const ClusterEnv o = read_cluster_env(lookup(e));
  EXPECT_EQ(o.master_addr, "10.0.0.9");
  EXPECT_EQ(o.master_port, 4000);
}

TEST(ClusterEnvTest, SlurmCountsThatDoNotAddUpAreRefused) {
  Env e = kSlurm;
  e["SLURM_TASKS_PER_NODE"] = "2(x3),2";
  EXPECT_TRUE(has(refusal(e), "adds up to 8 tasks, SLURM_NTASKS=7")) << refusal(e);
  e = kSlurm;
  e["SLURM_STEP_NODELIST"] = "gnode[10-11]";
  EXPECT_TRUE(has(refusal(e), "names 2 nodes, SLURM_NNODES=4")) << refusal(e);
  e = kSlurm;
  e["SLURM_PROCID"] = "7";
  EXPECT_TRUE(has(refusal(e), "SLURM_PROCID=7 is not below SLURM_NTASKS=7")) << refusal(e);
  e = kSlurm;
  e["SLURM_STEP_NODELIST"] = "gnode[10,20-";
  EXPECT_TRUE(has(refusal(e), "malformed node list")) << refusal(e);
}

TEST(ClusterEnvTest, SlurmListsExpand) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("gnode[10,20-22],login1"), (V{"gnode10", "gnode20", "gnode21", "gnode22", "login1"}));
  EXPECT_EQ(expand_slurm_nodelist("n[08-10]"), (V{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("a[1-2]-ib,b[7]"), (V{"a1-ib", "a2-ib", "b7"}));
  EXPECT_EQ(expand_slurm_nodelist("single"), (V{"single"}));
  for (const char* bad : {"g[1-", "g[3-1]", "g]1[", "g[1,,2]", "", "a,,b", "g[x-2]"})
    EXPECT_THROW(expand_slurm_nodelist(bad), distrl::ConfigError) << bad;
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), (std::vector<int>{4}));
  for (const char* bad : {"2(x", "2(x0)", "0", "a", "2(3)", ""})
    EXPECT_THROW(expand_slurm_tasks_per_node(bad), distrl::ConfigError) << bad;
}

TEST(ClusterEnvTest, TrainJobIsARankWithOneProcessPerNodeElseANodeForTheLauncher) {
  const Env one{{"PET_NNODES", "2"},
                {"PET_NPROC_PER_NODE", "1"},
                {"PET_NODE_RANK", "1"},
                {"PET_MASTER_ADDR", "train-node-0-0.train"},
                {"PET_MASTER_PORT", "29400"}};
  const ClusterEnv c = read_cluster_env(lookup(one));
  EXPECT_EQ(c.source, "trainjob");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.master_addr, "train-node-0-0.train");
  EXPECT_EQ(c.master_port, 29400);

  Env four = one;
  four["PET_NPROC_PER_NODE"] = "4";
  const ClusterEnv f = read_cluster_env(lookup(four));
  EXPECT_EQ(f.rank, -1);  // the ranks are distrl-launch's to start
  EXPECT_EQ(f.world_size, 8);
  const NodeEnv n = read_node_env(lookup(four));
  EXPECT_EQ(n.source, "trainjob");
  EXPECT_EQ(n.nnodes, 2);
  EXPECT_EQ(n.node_rank, 1);
  EXPECT_EQ(n.nproc_per_node, 4);
  EXPECT_EQ(n.master_addr, "train-node-0-0.train");
  EXPECT_EQ(n.master_port, 29400);
  Env missing = one;
  missing.erase("PET_NODE_RANK");
  EXPECT_TRUE(has(refusal(missing), "PET_NODE_RANK is not set")) << refusal(missing);
}

TEST(ClusterEnvTest, SrunWithOneTaskPerNodeIsANodeForTheLauncher) {
  const Env per_node{{"SLURM_PROCID", "1"},  {"SLURM_NTASKS", "2"},
                     {"SLURM_NNODES", "2"},  {"SLURM_NODEID", "1"},
                     {"SLURM_LOCALID", "0"}, {"SLURM_TASKS_PER_NODE", "1(x2)"},
                     {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_NODELIST", "c[3-4]"}};
  const NodeEnv n = read_node_env(lookup(per_node));
  EXPECT_EQ(n.source, "slurm");
  EXPECT_EQ(n.nnodes, 2);
  EXPECT_EQ(n.node_rank, 1);
  EXPECT_EQ(n.nproc_per_node, -1);
  EXPECT_EQ(n.master_addr, "c3");
  EXPECT_EQ(n.master_port, 20077);
  EXPECT_FALSE(read_node_env(lookup(kSlurm)).found());  // several tasks per node: they are the ranks
  Env child = per_node;
  child["RANK"] = "3";  // a rank distrl-launch started: not a launcher
  child["WORLD_SIZE"] = "4";
  EXPECT_FALSE(read_node_env(lookup(child)).found());
}

TEST(ClusterEnvTest, MpirunAndNothingAtAll) {
  const ClusterEnv c = read_cluster_env(lookup({{"OMPI_COMM_WORLD_RANK", "2"},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(c.source, "mpi");
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.local_world_size, 2);
  const ClusterEnv none = read_cluster_env(lookup({}));
  EXPECT_FALSE(none.found());
  EXPECT_EQ(none.describe(), "no launcher environment");
}

// resolve_world, the one place every process reads its rank, from the real environment.
TEST(ClusterEnvTest, ResolveWorldTakesEachLaunchersVariables) {
  struct Case {
    const char* name;
    Env env;
    int rank, world, local_rank;
    std::string addr;
    int port;
  };
  const Case cases[] = {
      {"torchrun", kTorchrun, 5, 8, 1, "node0", 29500},
      {"pytorchjob",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "job-master-0"}, {"MASTER_PORT", "23456"}},
       1,
       2,
       0,
       "job-master-0",
       23456},
      {"slurm", kSlurm, 5, 7, 1, "gnode10", 23456},
      {"trainjob",
       {{"PET_NNODES", "3"},
        {"PET_NPROC_PER_NODE", "1"},
        {"PET_NODE_RANK", "2"},
        {"PET_MASTER_ADDR", "m"},
        {"PET_MASTER_PORT", "29400"}},
       2,
       3,
       0,
       "m",
       29400},
  };
  for (const auto& c : cases) {
    const ScopedEnv scoped(c.env);
    const WorldSpec w = resolve_world("env://", -1, -1);
    EXPECT_EQ(w.rank, c.rank) << c.name;
    EXPECT_EQ(w.world_size, c.world) << c.name;
    EXPECT_EQ(w.local_rank, c.local_rank) << c.name;
    EXPECT_EQ(w.master_addr, c.addr) << c.name;
    EXPECT_EQ(w.master_port, c.port) << c.name;
  }
  ScopedEnv several({{"PET_NNODES", "2"},
                     {"PET_NPROC_PER_NODE", "4"},
                     {"PET_NODE_RANK", "0"},
                     {"PET_MASTER_ADDR", "m"},
                     {"PET_MASTER_PORT", "29400"}});
  try {
    resolve_world("env://", -1, -1);
    FAIL() << "a TrainJob node with 4 ranks is no rank";
  } catch (const distrl::ConfigError& e) {
    EXPECT_TRUE(has(e.what(), "distrl-launch")) << e.what();
  }
}
