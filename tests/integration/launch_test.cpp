// distrl-launch as a user runs it: a real binary starting real processes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/child_process.h"
#include "tests/support/command.h"
#include "tests/support/multiproc.h"
#include "tools/launcher.h"

namespace {
using distrl::testing::launch;
using distrl::testing::TempDir;
}  // namespace

TEST(LaunchTest, SetsRankVariablesAndPrefixesOutput) {
  auto r = launch(
      "--nproc 3 -- sh -c 'echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK addr=$MASTER_ADDR "
      "lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK; echo second'");
  EXPECT_EQ(r.code, 0) << r.output;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(r.output.find("[" + std::to_string(i) + "] rank=" + std::to_string(i) +
                            " world=3 local=" + std::to_string(i) + " addr=127.0.0.1 lws=3 group=0"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("[" + std::to_string(i) + "] second"), std::string::npos) << r.output;
  }
}

TEST(LaunchTest, MultiNodeRanksAreOffsetByNodeRank) {
  auto r = launch(
      "--nproc 2 --nnodes 3 --node-rank 2 --master-port 29999 -- sh -c "
      "'echo r=$RANK w=$WORLD_SIZE p=$MASTER_PORT l=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE g=$GROUP_RANK'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[4] r=4 w=6 p=29999 l=0 lws=2 g=2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[5] r=5 w=6 p=29999 l=1 lws=2 g=2"), std::string::npos) << r.output;
}

// One distrl-launch per node, as `srun --ntasks-per-node=1 distrl-launch ...` and a Kubeflow
// TrainJob start it: node count, node index, master (and TrainJob's ranks per node) come from
// the job's variables.
TEST(LaunchTest, NodesComeFromSrunAndTrainJobVariables) {
  const std::string echo =
      " -- sh -c 'echo r=$RANK w=$WORLD_SIZE a=$MASTER_ADDR p=$MASTER_PORT l=$LOCAL_RANK g=$GROUP_RANK'";
  auto srun = distrl::testing::run_command(
      "env SLURM_PROCID=1 SLURM_NTASKS=3 SLURM_NNODES=3 SLURM_NODEID=1 SLURM_LOCALID=0 SLURM_TASKS_PER_NODE='1(x3)' "
      "SLURM_JOB_ID=4242 SLURM_STEP_NODELIST='n[0-2]' " +
      distrl::testing::bin_path("distrl-launch") + " --nproc 2" + echo);
  EXPECT_EQ(srun.code, 0) << srun.output;
  EXPECT_NE(srun.output.find("slurm: node 1 of 3, master n0:24242"), std::string::npos) << srun.output;
  EXPECT_NE(srun.output.find("[2] r=2 w=6 a=n0 p=24242 l=0 g=1"), std::string::npos) << srun.output;
  EXPECT_NE(srun.output.find("[3] r=3 w=6 a=n0 p=24242 l=1 g=1"), std::string::npos) << srun.output;

  auto trainjob = distrl::testing::run_command(
      "env PET_NNODES=2 PET_NPROC_PER_NODE=3 PET_NODE_RANK=1 PET_MASTER_ADDR=trainer-0 PET_MASTER_PORT=29400 " +
      distrl::testing::bin_path("distrl-launch") + echo);
  EXPECT_EQ(trainjob.code, 0) << trainjob.output;
  for (int r = 3; r < 6; ++r)
    EXPECT_NE(trainjob.output.find("[" + std::to_string(r) + "] r=" + std::to_string(r) +
                                   " w=6 a=trainer-0 p=29400 l=" + std::to_string(r - 3) + " g=1"),
              std::string::npos)
        << trainjob.output;

  // The command line still wins.
  auto given = distrl::testing::run_command(
      "env PET_NNODES=2 PET_NPROC_PER_NODE=3 PET_NODE_RANK=1 PET_MASTER_ADDR=trainer-0 PET_MASTER_PORT=29400 " +
      distrl::testing::bin_path("distrl-launch") +
      " --nproc 1 --node-rank 0 --nnodes 1 --master-port 0 --master-addr 127.0.0.1" + echo);
  EXPECT_EQ(given.code, 0) << given.output;
  EXPECT_NE(given.output.find("[0] r=0 w=1 a=127.0.0.1"), std::string::npos) << given.output;

  auto broken = distrl::testing::run_command("env PET_NNODES=2 " + distrl::testing::bin_path("distrl-launch") + echo);
  EXPECT_EQ(broken.code, 2) << broken.output;
  EXPECT_NE(broken.output.find("PET_NODE_RANK is not set"), std::string::npos) << broken.output;
}

namespace {

// Shell: the rank's pid into DIR/pid.RANK, whole when the name appears (rename is atomic).
std::string write_pid(const TempDir& dir) {
  return "echo $$ > " + dir.path() + "/tmp.$RANK && mv " + dir.path() + "/tmp.$RANK " + dir.path() + "/pid.$RANK; ";
}

// Shell for the failing rank: once the other `others` ranks have written their pid files,
// exit 3 (so they are surely running when the launcher stops them).
std::string fail_after_pids(const TempDir& dir, int others) {
  return "while [ $(ls " + dir.path() + " | grep -c ^pid) -lt " + std::to_string(others) +
         " ]; do sleep 0.05; done; exit 3";
}

// Each rank but `failing` writes its pid to DIR/pid.RANK, then becomes a 600 s sleep: a
// launcher that does not stop it runs into the CTest timeout.
std::string ranks_that_wait(const TempDir& dir, int world, int failing) {
  return "sh -c 'if [ $RANK = " + std::to_string(failing) + " ]; then " + fail_after_pids(dir, world - 1) + "; fi; " +
         write_pid(dir) + "exec sleep 600'";
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return pid;
}

}  // namespace

TEST(LaunchTest, FirstFailureStopsTheOthersAndIsReturned) {
  TempDir dir;
  auto r = launch("--nproc 3 -- " + ranks_that_wait(dir, 3, 1));
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with code 3; stopping the others"), std::string::npos) << r.output;
  for (int rank : {0, 2}) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    ASSERT_GT(pid, 0) << "rank " << rank << " never started";
    EXPECT_FALSE(alive(pid)) << "rank " << rank << " outlived the launcher";
  }
}

// A rank that ignores SIGTERM gets SIGKILL once --grace has passed.
TEST(LaunchTest, RanksThatIgnoreSigtermAreKilledAfterTheGracePeriod) {
  TempDir dir;
  const std::string ignore = "trap \"touch " + dir.path() + "/term.$RANK\" TERM; ";
  // The shell itself stays (a trap runs only in the shell): it loops on short sleeps.
  auto r = launch("--nproc 2 --grace 1 -- sh -c 'if [ $RANK = 1 ]; then " + fail_after_pids(dir, 1) + "; fi; " +
                  ignore + write_pid(dir) + "while true; do sleep 0.05; done'");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("term.0"))) << "SIGTERM first";
  const pid_t pid = read_pid(dir.file("pid.0"));
  ASSERT_GT(pid, 0);
  EXPECT_FALSE(alive(pid)) << "then SIGKILL";
}

// distrl-launch itself stopped by SIGINT or SIGTERM: it stops every rank and exits 128 + sig.
TEST(LaunchTest, ItsOwnSignalStopsEveryRankAndSetsTheExitCode) {
  for (int sig : {SIGINT, SIGTERM}) {
    TempDir dir;
    const pid_t launcher = ::fork();
    if (launcher == 0) {
      int fd = ::open(dir.file("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      const std::string bin = distrl::testing::bin_path("distrl-launch");
      const std::string cmd = write_pid(dir) + "exec sleep 600";
      ::execl(bin.c_str(), bin.c_str(), "--nproc", "2", "--", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_TRUE(distrl::testing::wait_for_file(dir.file("pid.0"), std::chrono::seconds(30)));
    ASSERT_TRUE(distrl::testing::wait_for_file(dir.file("pid.1"), std::chrono::seconds(30)));
    ::kill(launcher, sig);
    int status = 0;
    ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
    ASSERT_TRUE(WIFEXITED(status)) << "the launcher died of the signal instead of handling it";
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    for (int rank : {0, 1}) EXPECT_FALSE(alive(read_pid(dir.file("pid." + std::to_string(rank))))) << rank;
    const std::string out = distrl::testing::read_file(dir.file("out"));
    EXPECT_NE(out.find(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + ": stopping every rank"), std::string::npos)
        << out;
  }
}

// A rank killed before it could remove its ipc endpoints (/tmp/distrl-<pid>-*.ipc): the
// launcher removes them once the rank has exited. Before, every signal exit left them behind.
TEST(LaunchTest, AKilledRanksIpcFilesAreRemoved) {
  TempDir dir;
  // exec keeps the shell's pid, so the file is named as a rank's own endpoint would be.
  auto r = launch("--nproc 2 -- sh -c 'touch /tmp/distrl-$$-test.ipc; echo $$ > " + dir.path() +
                  "/pid.$RANK; if [ $RANK = 1 ]; then while [ ! -e " + dir.path() +
                  "/pid.0 ]; do sleep 0.05; done; exit 3; fi; "
                  "exec sleep 600'");
  EXPECT_EQ(r.code, 3) << r.output;
  for (int rank : {0, 1}) {
    const pid_t pid = read_pid(dir.file("pid." + std::to_string(rank)));
    ASSERT_GT(pid, 0);
    EXPECT_FALSE(std::filesystem::exists("/tmp/distrl-" + std::to_string(pid) + "-test.ipc")) << rank;
  }
}

// One distrl-launch per node with the same config, as on two machines: the config's 4 ranks
// (the agent and 3 observers) split in blocks, node 0 ranks 0-1, node 1 ranks 2-3; the run
// finishes on both. More nodes than ranks is refused before anything starts.
TEST(LaunchTest, AConfigIsSplitOverNodesInBlocks) {
  TempDir dir;
  const std::string args = "--nnodes 2 --master-port " + std::to_string(distrl::tools::free_port("127.0.0.1")) +
                           " --config " + std::string(DISTRL_SOURCE_DIR) +
                           "/configs/cartpole.yaml observers=3 learner.rounds=5 "
                           "run.out_dir=" +
                           dir.path();
  // At info level (the suite runs at warn) every rank says who it is: the observers' lines count.
  distrl::testing::ChildProcess node1(
      distrl::testing::ChildProcess::shell(distrl::testing::bin_path("distrl-launch") + " --node-rank 1 " + args),
      dir.file("node1.log"), {{"DISTRL_LOG_LEVEL", "info"}});
  auto node0 = distrl::testing::run_command("DISTRL_LOG_LEVEL=info " + distrl::testing::bin_path("distrl-launch") +
                                            " --node-rank 0 " + args);
  EXPECT_EQ(node0.code, 0) << node0.output;
  EXPECT_EQ(node1.wait_for(std::chrono::seconds(60)), 0) << node1.output();
  // Lines carry global ranks: the agent (0) and observer 1 here, observers 2 and 3 there.
  for (const char* mine : {"[0] ", "[1] "}) EXPECT_NE(node0.output.find(mine), std::string::npos) << node0.output;
  for (const char* theirs : {"[2] ", "[3] "}) EXPECT_EQ(node0.output.find(theirs), std::string::npos) << node0.output;
  for (const char* mine : {"[2] ", "[3] "}) EXPECT_NE(node1.output().find(mine), std::string::npos) << node1.output();
  EXPECT_NE(node0.output.find("3 observer(s) joined"), std::string::npos) << node0.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("policy.pt"))) << node0.output;

  auto refused = launch("--nnodes 5 --node-rank 4 --master-port 29999 --config " + std::string(DISTRL_SOURCE_DIR) +
                        "/configs/cartpole.yaml observers=2 run.out_dir=" + dir.path() + "/more");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("its 3 ranks cannot fill --nnodes 5"), std::string::npos) << refused.output;
}

// `workload: rl` (issue 46): the RL configs name their workload; a file from before it (no
// `workload`, no `dist`) still runs as RL, the agent saying once how to name it.
TEST(LaunchTest, AnRlConfigWithoutAWorkloadKeyRunsAsRlSayingSo) {
  TempDir dir;
  std::string yaml = distrl::testing::read_file(std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole.yaml");
  ASSERT_NE(yaml.find("workload: rl\n"), std::string::npos);
  std::ofstream(dir.file("old.yaml")) << yaml.replace(yaml.find("workload: rl\n"), 13, "");
  for (const std::string& file : {dir.file("old.yaml"), std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole.yaml"}) {
    const bool old = file == dir.file("old.yaml");
    auto r = launch("--config " + file + " observers=1 learner.rounds=2 run.out_dir=" + dir.file(old ? "old" : "new"));
    EXPECT_EQ(r.code, 0) << r.output;
    const auto said = r.output.find("names no workload: read as `workload: rl` (add that line to the file)");
    EXPECT_EQ(said != std::string::npos, old) << r.output;
    if (old) {
      EXPECT_EQ(r.output.find("names no workload", said + 1), std::string::npos) << "said once:\n" << r.output;
    }
  }
  auto wrong = launch("--config " + dir.file("old.yaml") + " workload=ddp --check-config");
  EXPECT_NE(wrong.code, 0) << wrong.output;
}

TEST(LaunchTest, BadUsageIsAConfigError) {
  EXPECT_EQ(launch("--nproc 2").code, 2);
  EXPECT_EQ(launch("--nproc 2 --nnodes 2 -- true").code, 2);  // multi-node needs a fixed port
  auto help = launch("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.output.find("--nproc"), std::string::npos);
  EXPECT_EQ(launch("--nproc 1 -- /nonexistent/program").code, 127);

  // Issue 35: no arguments shows both forms; --help lists --check-config, --force and every
  // workload with its tool; --nproc beside --config (ignored before) is refused.
  auto none = launch("");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("distrl-launch --config FILE"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find("distrl-launch --nproc N"), std::string::npos) << none.output;
  for (const std::string text : {"--check-config", "--force", "rnn_dist_autograd (distrl-rnn)", "ps_hybrid (distrl-ps)",
                                 "pipeline_resnet50 (distrl-pipeline)", "ddp (distrl-train)"})
    EXPECT_NE(help.output.find(text), std::string::npos) << text << "\n" << help.output;
  const std::string cartpole = std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole.yaml";
  auto both = launch("--config " + cartpole + " --nproc 3");
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_NE(both.output.find("--nproc does not go with --config"), std::string::npos) << both.output;
}

// Issue 43, the first hour's mistakes, each named with its fix before anything starts (exit 2):
// a config given without --config, another workload's run-length key, 'key = value' as three
// words (read as meant), an output directory on /proc, a missing dataset; --help says how to
// resume and how to see a workload's keys, and `--config F --help` lists them.
TEST(LaunchTest, TheFirstHoursMistakesAreNamedWithTheirFix) {
  const std::string configs = std::string(DISTRL_SOURCE_DIR) + "/configs/";
  auto bare = launch(configs + "cartpole.yaml");
  EXPECT_EQ(bare.code, 2) << bare.output;
  EXPECT_NE(
      bare.output.find("is a config file: give it with --config (distrl-launch --config " + configs + "cartpole.yaml)"),
      std::string::npos)
      << bare.output;
  auto cap = launch("--config " + configs + "ddp_toy.yaml learner.rounds=3 --check-config");
  EXPECT_EQ(cap.code, 2) << cap.output;
  EXPECT_NE(cap.output.find("unknown key 'learner.rounds' (did you mean train.epochs?)"), std::string::npos)
      << cap.output;
  auto spaced = launch("--config " + configs + "cartpole.yaml learner.rounds = 3 observers = 1 --check-config");
  EXPECT_EQ(spaced.code, 0) << spaced.output;
  EXPECT_NE(spaced.output.find("ok: rl, 2 ranks (1 agent + 1 observer;"), std::string::npos) << spaced.output;
  auto proc = launch("--config " + configs + "cartpole.yaml run.out_dir=/proc/distrl --check-config");
  EXPECT_EQ(proc.code, 2) << proc.output;
  EXPECT_NE(proc.output.find("is on /proc, a proc file system of the kernel's"), std::string::npos) << proc.output;
  auto data = launch("--config " + configs + "pipeline_fashion_mnist.yaml data.path=/nonexistent --check-config");
  EXPECT_EQ(data.code, 2) << data.output;
  EXPECT_NE(data.output.find("dataset: no train-images-idx3-ubyte[.gz] in '/nonexistent'"), std::string::npos)
      << data.output;
  auto help = launch("--help");
  for (const std::string text : {"--resume", "distrl-launch --config FILE --help"})
    EXPECT_NE(help.output.find(text), std::string::npos) << text << "\n" << help.output;
  auto keys = launch("--config " + configs + "cartpole.yaml --help");
  EXPECT_EQ(keys.code, 0) << keys.output;
  EXPECT_NE(keys.output.find("the keys of its workload (rl)"), std::string::npos) << keys.output;
  EXPECT_NE(keys.output.find("--learner.rounds"), std::string::npos) << keys.output;
}

// --check-config: what would run, one line, and nothing started (no output directory made).
TEST(LaunchTest, CheckConfigSaysWhatWouldRunAndStartsNothing) {
  TempDir dir;
  const std::string configs = std::string(DISTRL_SOURCE_DIR) + "/configs/";
  auto rl = launch("--config " + configs + "cartpole.yaml --check-config observers=3 run.out_dir=" + dir.file("rl"));
  EXPECT_EQ(rl.code, 0) << rl.output;
  EXPECT_NE(rl.output.find("distrl-agent: ok: rl, 4 ranks (1 agent + 3 observers; CartPole-v1, reinforce, batched); "
                           "outputs in " +
                           dir.file("rl")),
            std::string::npos)
      << rl.output;
  auto pipe = launch("--config " + configs + "pipeline_fashion_mnist.yaml --check-config run.out_dir=" + dir.file("p"));
  EXPECT_EQ(pipe.code, 0) << pipe.output;
  EXPECT_NE(pipe.output.find("distrl-pipeline: ok: pipeline_fashion_mnist, 2 ranks (2 stages; schedule 1f1b, 4 "
                             "micro-batches: ideal bubble 20.0 %)"),
            std::string::npos)
      << pipe.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("rl")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("p")));
}
