// The RL loop as a user runs it: distrl-launch --config starting distrl-agent and
// distrl-observer processes over real sockets, in both serving modes; checkpoints and
// --resume; a killed agent makes the observers exit with a clear message.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/command.h"
#include "tests/support/multiproc.h"

namespace {

using namespace std::chrono_literals;
using distrl::testing::launch;
using distrl::testing::TempDir;

const std::string kConfig = std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole.yaml";

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RlRunTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RlRunTest, AgentAndTwoObserversRunEpisodesAndShutDownCleanly) {
  distrl::testing::TempDir dir;
  auto r = launch("--config " + kConfig + " observers=2 --agent.mode " + GetParam() +
                  " learner.episodes=6 learner.max_steps=60 learner.log_interval=2 run.out_dir=" + dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Stopped after 6 rounds (12 episodes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("round     4  episodes      8"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(dir.path() + "/metrics.csv"), 7);  // header + one row per round
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/policy.pt"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/learning_curve.png"));  // gnuplot comes with make deps
  EXPECT_NE(read_file(dir.path() + "/config.yaml").find("mode: " + GetParam()), std::string::npos);
  const std::string summary = read_file(dir.path() + "/summary.csv");
  EXPECT_NE(summary.find("\n2," + GetParam() + ",1,6,12,"), std::string::npos) << summary;

  // Resume from the checkpoint: the round counter and the running reward carry on.
  auto again = launch("--config " + kConfig + " observers=2 --agent.mode " + GetParam() +
                      " learner.episodes=2 learner.max_steps=60 run.out_dir=" + dir.path() + " --resume " +
                      dir.path() + "/policy.pt");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from"), std::string::npos) << again.output;
}

INSTANTIATE_TEST_SUITE_P(Modes, RlRunTest, ::testing::Values("batched", "unbatched"));

TEST(RlConfigTest, BadKeysAndValuesStopTheLaunchWithTheirNames) {
  auto r = launch("--config " + kConfig + " agent.mdoe=batched");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown key 'agent.mdoe'"), std::string::npos) << r.output;
  r = launch("--config " + kConfig + " --agent.mode fast");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("'fast' is not one of: batched, unbatched"), std::string::npos) << r.output;
  r = launch("--config " + kConfig + " --agent.device cuda");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cuda"), std::string::npos) << r.output;
  auto help = distrl::testing::run_command(distrl::testing::bin_path("distrl-agent") + " --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.output.find("--agent.max_wait_us"), std::string::npos) << help.output;
}

pid_t spawn(const std::vector<std::string>& cmd, const std::string& log, int rank, int port) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", "3", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits up to `limit` for pid; returns its exit code, or -1 if it is still running.
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(20ms);
  }
  return -1;
}

TEST(RlFailureTest, ObserversExitWithAClearMessageWhenTheAgentIsKilled) {
  distrl::testing::TempDir dir;
  const int port = 20000 + ::getpid() % 20000;
  std::vector<std::string> args{"--config", kConfig, "rpc.timeout_s=5", "learner.episodes=100000",
                                "learner.learn=false", "run.out_dir=" + dir.path()};
  auto with = [&](const std::string& tool) {
    std::vector<std::string> v{distrl::testing::bin_path(tool)};
    v.insert(v.end(), args.begin(), args.end());
    return v;
  };
  pid_t agent = spawn(with("distrl-agent"), dir.path() + "/agent.log", 0, port);
  std::vector<pid_t> observers{spawn(with("distrl-observer"), dir.path() + "/obs1.log", 1, port),
                               spawn(with("distrl-observer"), dir.path() + "/obs2.log", 2, port)};
  // Kill the agent once episodes are under way (metrics.csv has rows).
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (count_lines(dir.path() + "/metrics.csv") < 3 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  ASSERT_GE(count_lines(dir.path() + "/metrics.csv"), 3) << read_file(dir.path() + "/agent.log");
  ::kill(agent, SIGKILL);
  wait_exit(agent, 10s);
  const auto killed = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < observers.size(); ++i) {
    const int code = wait_exit(observers[i], 30s);
    const std::string log = read_file(dir.path() + "/obs" + std::to_string(i + 1) + ".log");
    if (code == -1) ::kill(observers[i], SIGKILL);
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(code, -1) << "observer still running 30 s after the agent died:\n" << log;
    EXPECT_NE(log.find("distrl-observer:"), std::string::npos) << log;
    EXPECT_NE(log.find("agent"), std::string::npos) << log;
  }
  // rpc.timeout_s is 5: well within it plus the shutdown of the process.
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 20s);
}

// PPO over real processes: observers send fragments (discrete and continuous actions), the
// agent learns, saves, and evaluates the checkpoint alone.
TEST(PpoRunTest, FragmentsFlowForDiscreteAndContinuousEnvsAndEvalReadsTheCheckpoint) {
  const std::string ppo = std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole_ppo.yaml";
  TempDir dir;
  auto r = launch("--config " + ppo + " learner.episodes=4 ppo.steps=32 env.per_observer=4 run.out_dir=" + dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ppo (actor-critic)"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(dir.path() + "/metrics.csv"), 5);  // header + 4 rounds
  auto e = distrl::testing::run_command(distrl::testing::bin_path("distrl-agent") + " --config " + ppo +
                                        " --eval --episodes 3 --checkpoint " + dir.path() + "/policy.pt --render " +
                                        dir.path() + "/episode.gif 2>&1");
  EXPECT_EQ(e.code, 0) << e.output;
  EXPECT_NE(e.output.find("3 episodes: mean return"), std::string::npos) << e.output;
  EXPECT_GT(std::filesystem::file_size(dir.path() + "/episode.gif"), 1000u);

  const std::string cont = std::string(DISTRL_SOURCE_DIR) + "/configs/lunarlander_continuous_ppo.yaml";
  TempDir dir2;
  r = launch("--config " + cont + " learner.episodes=2 ppo.steps=16 env.per_observer=2 run.out_dir=" + dir2.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(dir2.path() + "/metrics.csv"), 3);

  // REINFORCE cannot drive continuous actions: refused by name before anything starts.
  r = launch("--config " + cont + " learner.algo=reinforce run.out_dir=" + dir2.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("learner.algo=ppo"), std::string::npos) << r.output;
}

}  // namespace
