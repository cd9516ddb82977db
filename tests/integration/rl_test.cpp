// The RL loop as a user runs it: distrl-launch --config starting distrl-agent and
// distrl-observer processes over real sockets, in both serving modes; checkpoints and
// --resume; a killed agent makes the observers exit with a clear message.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "envs/env.h"
#include "tests/support/child_process.h"
#include "tests/support/command.h"
#include "tests/support/tfevents.h"
#include "tests/support/multiproc.h"

namespace {

using namespace std::chrono_literals;
using distrl::testing::launch;
using distrl::testing::read_file;
using distrl::testing::TempDir;

const std::string kConfig = std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole.yaml";

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

class RlRunTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RlRunTest, AgentAndTwoObserversRunEpisodesAndShutDownCleanly) {
  distrl::testing::TempDir dir;
  auto r = launch("--config " + kConfig + " observers=2 --agent.mode " + GetParam() +
                  " learner.rounds=6 learner.max_steps=60 learner.log_interval=2 run.out_dir=" + dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Stopped after 6 rounds (12 episodes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("round     4  episodes      8"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(dir.path() + "/metrics.csv"), 7);  // header + one row per round
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/policy.pt"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/learning_curve.png"));  // gnuplot comes with make deps
  EXPECT_EQ(distrl::testing::count_event_files(dir.path()), 1);              // run.tensorboard is on by default
  const auto events = distrl::testing::read_tfevents(dir.path());
  if (events.ran) {  // TensorBoard's own reader sees every round
    EXPECT_EQ(events.code, 0) << events.out;
    EXPECT_EQ(events.points("reward/running"), 6) << events.out;
    EXPECT_EQ(events.points("env_steps_per_s"), 6) << events.out;
    EXPECT_EQ(events.points("loss"), 6) << events.out;
  }
  EXPECT_NE(read_file(dir.path() + "/config.yaml").find("mode: " + GetParam()), std::string::npos);
  const std::string summary = read_file(dir.path() + "/summary.csv");
  EXPECT_NE(summary.find("\n2," + GetParam() + ",1,6,12,"), std::string::npos) << summary;
}

INSTANTIATE_TEST_SUITE_P(Modes, RlRunTest, ::testing::Values("batched", "unbatched"));

// security: curve (docs/security.md): the same run with every socket authenticated and
// encrypted, with a key distrl-launch makes and with one from distrl-keygen; a key file others
// can read is refused before anything starts.
TEST(RlSecurityTest, ACurveRunTrainsAsAPlainOneWithAMadeOrAGivenKey) {
  TempDir dir;
  const std::string run = "--config " + kConfig + " observers=2 learner.rounds=4 learner.max_steps=40 run.out_dir=";
  auto made = launch(run + dir.file("made") + " security=curve run.tensorboard=false");
  ASSERT_EQ(made.code, 0) << made.output;
  EXPECT_EQ(distrl::testing::count_event_files(dir.file("made")), 0);  // turned off
  EXPECT_NE(made.output.find("Stopped after 4 rounds (8 episodes"), std::string::npos) << made.output;
  EXPECT_EQ(count_lines(dir.file("made") + "/metrics.csv"), 5);

  const std::string key = dir.file("world.key");
  auto gen = distrl::testing::run_command(distrl::testing::bin_path("distrl-keygen") + " " + key);
  ASSERT_EQ(gen.code, 0) << gen.output;
  EXPECT_NE(gen.output.find("security_key: " + key), std::string::npos) << gen.output;
  auto again = distrl::testing::run_command(distrl::testing::bin_path("distrl-keygen") + " " + key);
  EXPECT_NE(again.code, 0);  // never overwrites a world's key by accident
  EXPECT_NE(again.output.find("--force"), std::string::npos) << again.output;
  auto given = launch(run + dir.file("given") + " --agent.mode unbatched security=curve security_key=" + key);
  ASSERT_EQ(given.code, 0) << given.output;
  EXPECT_EQ(count_lines(dir.file("given") + "/metrics.csv"), 5);

  ::chmod(key.c_str(), 0644);
  auto open_key = launch(run + dir.file("open") + " security=curve security_key=" + key);
  EXPECT_EQ(open_key.code, 2) << open_key.output;
  EXPECT_NE(open_key.output.find("chmod 600"), std::string::npos) << open_key.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("open") + "/metrics.csv"));
}

TEST(RlRunTest, BatchesClosedWhenTheRequestsAreReadAndThatModeNeedsInlineServing) {
  distrl::testing::TempDir dir;
  auto r = launch("--config " + kConfig +
                  " observers=3 agent.batch_close=read learner.rounds=4 learner.max_steps=40 "
                  "run.out_dir=" +
                  dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Stopped after 4 rounds (12 episodes"), std::string::npos) << r.output;
  r = launch("--config " + kConfig +
             " observers=2 agent.batch_close=read agent.serve_inline=false run.out_dir=" + dir.path() + "/pool");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("agent.batch_close: read needs agent.serve_inline: true"), std::string::npos) << r.output;
}

// metrics.csv as rows of numbers (header dropped); columns as in the header below.
std::vector<std::vector<double>> read_metrics(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "round,episodes,env_steps,seconds,mean_reward,min_reward,max_reward,running_reward,loss,mean_batch");
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(std::stod(cell));
    rows.push_back(row);
  }
  return rows;
}
enum Col { kRound = 0, kEpisodes = 1, kEnvSteps = 2, kSeconds = 3, kMean = 4, kRunning = 7 };

// A resumed run continues the interrupted one: rounds count on, metrics.csv grows, episode and
// step counts and the running reward carry over (REINFORCE: running = 0.05 mean + 0.95 previous).
TEST(RlResumeTest, RoundsMetricsAndRunningRewardCarryOn) {
  TempDir dir;
  const std::string common = "--config " + kConfig + " observers=2 learner.max_steps=60 run.out_dir=" + dir.path();
  auto first = launch(common + " learner.rounds=4");
  ASSERT_EQ(first.code, 0) << first.output;
  const auto before = read_metrics(dir.path() + "/metrics.csv");
  ASSERT_EQ(before.size(), 4u);

  auto again = launch(common + " learner.rounds=7 --resume " + dir.path() + "/policy.pt");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from " + dir.path() + "/policy.pt at round 4 (8 episodes"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("Stopped after 7 rounds (14 episodes"), std::string::npos) << again.output;
  const auto rows = read_metrics(dir.path() + "/metrics.csv");
  ASSERT_EQ(rows.size(), 7u);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][kRound], double(i + 1));
    EXPECT_EQ(rows[i][kEpisodes], double(2 * (i + 1)));  // two observers, one episode each per round
    if (i > 0) {
      EXPECT_GT(rows[i][kEnvSteps], rows[i - 1][kEnvSteps]) << "row " << i;
      EXPECT_GE(rows[i][kSeconds], rows[i - 1][kSeconds]) << "row " << i;
      EXPECT_NEAR(rows[i][kRunning], 0.05 * rows[i][kMean] + 0.95 * rows[i - 1][kRunning], 1e-3) << "row " << i;
    }
  }
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_EQ(rows[i], before[i]) << "row " << i << " rewritten";

  // A checkpoint that is missing, or does not fit the configured model: exit 2 naming the file.
  auto missing = launch(common + " learner.rounds=8 --resume " + dir.path() + "/nothing.pt");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--resume " + dir.path() + "/nothing.pt: no such file"), std::string::npos)
      << missing.output;
  auto misfit = launch(common + " learner.rounds=8 model.hidden=[32] --resume " + dir.path() + "/policy.pt");
  EXPECT_EQ(misfit.code, 2) << misfit.output;
  EXPECT_NE(misfit.output.find("checkpoint '" + dir.path() + "/policy.pt' does not fit this model: "),
            std::string::npos)
      << misfit.output;
  EXPECT_NE(misfit.output.find("[128, 4] in the file, Float[32, 4] in the model"), std::string::npos) << misfit.output;

  // Issue 35: a checkpoint already at learner.rounds is refused before anything starts, and the
  // outputs stay as they were (it used to say "ran all 5 rounds" and rewrite summary.csv empty).
  const std::string summary = read_file(dir.file("summary.csv"));
  auto done = launch(common + " learner.rounds=5 --resume " + dir.path() + "/policy.pt");
  EXPECT_EQ(done.code, 2) << done.output;
  EXPECT_NE(done.output.find("the checkpoint is at round 7 and learner.rounds is 5: nothing is left to run; raise it "
                             "(e.g. learner.rounds=12)"),
            std::string::npos)
      << done.output;
  EXPECT_NE(done.output.find("nothing started"), std::string::npos) << done.output;
  EXPECT_EQ(read_file(dir.file("summary.csv")), summary);
  EXPECT_EQ(read_metrics(dir.path() + "/metrics.csv").size(), 7u);
  // A REINFORCE checkpoint given to a PPO run: named as such (it was LibTorch's "No such
  // serialized submodule: 'pi'").
  auto other =
      launch("--config " + std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole_ppo.yaml run.out_dir=" + dir.path() +
             " --resume " + dir.path() + "/policy.pt");
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_NE(other.output.find("was saved by a learner.algo reinforce run, and this run is ppo"), std::string::npos)
      << other.output;
  // learner.rounds was learner.episodes: the old name still works, saying so.
  auto old_name = launch(common + " learner.episodes=8 --resume " + dir.path() + "/policy.pt");
  EXPECT_EQ(old_name.code, 0) << old_name.output;
  EXPECT_NE(old_name.output.find("[0] distrl-agent: command line: learner.episodes is called learner.rounds now"),
            std::string::npos)
      << old_name.output;
  EXPECT_EQ(old_name.output.find("distrl-observer: command line: learner.episodes is called"), std::string::npos)
      << "every rank said it: " << old_name.output;
  EXPECT_NE(old_name.output.find("Stopped after 8 rounds"), std::string::npos) << old_name.output;
}

// Issue 43: run directories never mix. A resume into the directory of another run is refused
// naming both runs; one into a new directory takes the checkpoint's run and goes on there; a
// run killed after its last checkpoint resumes without repeating rows (those past the
// checkpoint are dropped); the stop line gives the whole command.
TEST(RlRunDirTest, AResumeGoesOnlyIntoItsOwnRunsOutputs) {
  TempDir a, b, fresh;
  const std::string common = "--config " + kConfig + " observers=1 learner.max_steps=30 ";
  ASSERT_EQ(launch(common + "learner.rounds=3 run.out_dir=" + a.path()).code, 0);
  ASSERT_EQ(launch(common + "learner.rounds=3 run.out_dir=" + b.path()).code, 0);
  const std::string b_metrics = read_file(b.file("metrics.csv"));
  auto crossed = launch(common + "learner.rounds=6 run.out_dir=" + b.path() + " --resume " + a.file("policy.pt"));
  EXPECT_EQ(crossed.code, 2) << crossed.output;
  EXPECT_NE(crossed.output.find("the checkpoint belongs to run "), std::string::npos) << crossed.output;
  EXPECT_NE(crossed.output.find("run.out_dir '" + b.path() + "' holds the outputs of run "), std::string::npos)
      << crossed.output;
  EXPECT_NE(crossed.output.find("run.out_dir=" + a.path()), std::string::npos) << crossed.output;
  EXPECT_EQ(read_file(b.file("metrics.csv")), b_metrics) << "nothing was appended";
  // Into a directory of its own: the run goes on there under its id.
  auto moved = launch(common + "learner.rounds=5 run.out_dir=" + fresh.path() + "/on --resume " + a.file("policy.pt"));
  ASSERT_EQ(moved.code, 0) << moved.output;
  EXPECT_EQ(read_file(fresh.file("on/.distrl-run")).substr(0, 16), read_file(a.file(".distrl-run")).substr(0, 16));
  // Rows past the checkpoint (a run killed after its last checkpoint wrote them) are run again,
  // not repeated: here round 3's row as round 4 stands in for one.
  const std::string rows = read_file(a.file("metrics.csv"));
  const std::string last = rows.substr(rows.rfind('\n', rows.size() - 2) + 1);
  std::ofstream(a.file("metrics.csv"), std::ios::app) << "4" << last.substr(last.find(','));
  auto again = launch(common + "learner.rounds=5 run.out_dir=" + a.path() + " --resume " + a.file("policy.pt"));
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("dropped 1 row past 3"), std::string::npos) << again.output;
  const auto metrics = read_metrics(a.file("metrics.csv"));
  ASSERT_EQ(metrics.size(), 5u);
  for (std::size_t i = 0; i < metrics.size(); ++i) EXPECT_EQ(metrics[i][kRound], double(i + 1));
  // A stop line names the whole command that goes on.
  auto stopped = distrl::testing::launch_interrupted(
      common + "learner.rounds=100000 learner.log_interval=1 run.out_dir=" + a.path() + " --resume " +
          a.file("policy.pt"),
      "] round     7", SIGINT);
  EXPECT_EQ(stopped.code, 130) << stopped.output;
  EXPECT_NE(stopped.output.find("go on with: " + distrl::testing::bin_path("distrl-launch") + " --config " + kConfig +
                                " observers=1 learner.max_steps=30 learner.rounds=100000 learner.log_interval=1 "
                                "run.out_dir=" +
                                a.path() + " --resume " + a.file("policy.pt")),
            std::string::npos)
      << stopped.output;
  EXPECT_NE(stopped.output.find("TensorBoard: " + a.path() + "/events.out.tfevents."), std::string::npos)
      << stopped.output;
}

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

// Processes started by a test; whatever is still running when the test ends (an assertion
// returned early) is SIGKILLed and reaped, so no test leaves orphans behind.
class Spawned {
 public:
  // Starts cmd as rank `rank` of `world`, rendezvous through file:// in dir, output to log.
  // log_level: DISTRL_LOG_LEVEL (ctest's is warn).
  pid_t start(std::vector<std::string> cmd, const std::string& log, int rank, int world, const TempDir& dir,
              const std::string& log_level = "warn", const distrl::testing::ChildProcess::Env& extra = {}) {
    cmd.push_back("--init-method");
    cmd.push_back("file://" + dir.file("rendezvous"));
    distrl::testing::ChildProcess::Env env{
        {"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)}, {"DISTRL_LOG_LEVEL", log_level}};
    env.insert(env.end(), extra.begin(), extra.end());
    procs_.push_back(std::make_unique<distrl::testing::ChildProcess>(cmd, log, env));
    return procs_.back()->pid();
  }
  // Waits up to `limit` for pid; returns its exit code (128 + signal), or -1 if it still runs.
  int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
    for (auto& p : procs_)
      if (p->pid() == pid) return p->wait_for(limit);
    return -1;
  }

 private:
  std::vector<std::unique_ptr<distrl::testing::ChildProcess>> procs_;  // killed if still running at the end
};

// Waits until metrics.csv has at least `lines` lines (episodes are under way).
bool wait_for_rows(const std::string& metrics, int lines, std::chrono::seconds limit) {
  return distrl::testing::wait_until([&] { return count_lines(metrics) >= lines; }, limit);
}

// Waits until the log file holds `text` (from byte `from` on).
bool log_says(const std::string& log, const std::string& text, std::chrono::seconds limit = 30s, std::size_t from = 0) {
  return distrl::testing::wait_until([&] { return read_file(log).find(text, from) != std::string::npos; }, limit);
}

std::vector<std::string> tool(const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), distrl::testing::bin_path(name));
  return args;
}

// distrl-agent (rank 0, agent.log) and two distrl-observer processes (obs1.log, obs2.log).
struct Run {
  pid_t agent;
  std::vector<pid_t> observers;
};
Run start_run(Spawned& procs, const TempDir& dir, const std::vector<std::string>& args) {
  Run r;
  r.agent = procs.start(tool("distrl-agent", args), dir.file("agent.log"), 0, 3, dir);
  for (int i = 1; i <= 2; ++i)
    r.observers.push_back(
        procs.start(tool("distrl-observer", args), dir.file("obs" + std::to_string(i) + ".log"), i, 3, dir));
  return r;
}

// docs/rl.md promises: exit 1 and "lost the agent: ..." within rpc.timeout_s.
TEST(RlFailureTest, ObserversExitWithAClearMessageWhenTheAgentIsKilled) {
  TempDir dir;
  const std::vector<std::string> args{"--config",
                                      kConfig,
                                      "rpc.timeout_s=5",
                                      "learner.rounds=100000",
                                      "learner.learn=false",
                                      "run.out_dir=" + dir.path()};
  Spawned procs;
  const auto [agent, observers] = start_run(procs, dir, args);
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 3, 60s)) << read_file(dir.file("agent.log"));
  ::kill(agent, SIGKILL);
  EXPECT_EQ(procs.wait_exit(agent, 10s), 128 + SIGKILL);
  for (std::size_t i = 0; i < observers.size(); ++i) {
    // rpc.timeout_s is 5; 30 s is for a loaded machine and still catches an observer that hangs.
    const int code = procs.wait_exit(observers[i], 30s);
    const std::string log = read_file(dir.file("obs" + std::to_string(i + 1) + ".log"));
    EXPECT_EQ(code, 1) << log;
    EXPECT_NE(log.find("distrl-observer: lost the agent: "), std::string::npos) << log;
  }
}

// summary.csv's second line as name -> value.
std::map<std::string, std::string> read_summary(const std::string& path) {
  std::ifstream in(path);
  std::string head, row;
  std::getline(in, head);
  std::getline(in, row);
  std::stringstream hs(head), rs(row);
  std::map<std::string, std::string> out;
  for (std::string k, v; std::getline(hs, k, ',') && std::getline(rs, v, ',');) out[k] = v;
  return out;
}

// An observer that dies is dropped; the agent finishes its rounds with the other one and says
// so in summary.csv; the surviving observer exits 0.
TEST(RlFailureTest, TheAgentDropsADeadObserverAndFinishesTheRun) {
  TempDir dir;
  const std::vector<std::string> args{"--config",
                                      kConfig,
                                      "rpc.timeout_s=10",
                                      "learner.rounds=40",
                                      "learner.max_steps=50",
                                      "run.out_dir=" + dir.path()};
  Spawned procs;
  const auto [agent, observers] = start_run(procs, dir, args);
  const pid_t keeps = observers[0], dies = observers[1];
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 3, 60s)) << read_file(dir.file("agent.log"));
  ::kill(dies, SIGKILL);
  EXPECT_EQ(procs.wait_exit(dies, 10s), 128 + SIGKILL);
  EXPECT_EQ(procs.wait_exit(agent, 90s), 0) << read_file(dir.file("agent.log"));
  EXPECT_EQ(procs.wait_exit(keeps, 30s), 0) << read_file(dir.file("obs1.log"));
  const std::string log = read_file(dir.file("agent.log"));
  EXPECT_NE(log.find("dropping observer 1 (observer2)"), std::string::npos) << log;
  EXPECT_NE(log.find("after 40 rounds"), std::string::npos) << log;
  auto sum = read_summary(dir.file("summary.csv"));
  EXPECT_EQ(sum["observers_lost"], "1");
  EXPECT_EQ(sum["rounds"], "40");
  EXPECT_EQ(count_lines(dir.file("metrics.csv")), 41);
}

// An observer stalled for longer than the heartbeat timeout (SIGSTOP: its connections stay open,
// nothing answers) is dropped like a dead one, and readmitted once it runs again: the agent goes
// on with both, the observer never exits, summary.csv counts it readmitted and not lost.
TEST(RlFailureTest, AStalledObserverIsDroppedAndReadmittedWhenItRunsAgain) {
  TempDir dir;
  const std::vector<std::string> args{"--config", kConfig, "learner.rounds=100000", "learner.max_steps=50",
                                      "run.out_dir=" + dir.path()};
  Spawned procs;
  const auto [agent, observers] = start_run(procs, dir, args);
  const auto agent_log = [&] {  // and the stalled observer's, for a failure's message
    return read_file(dir.file("agent.log")) + "\n--- observer 2:\n" + read_file(dir.file("obs2.log"));
  };
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 3, 60s)) << agent_log();
  ::kill(observers[1], SIGSTOP);
  ASSERT_TRUE(log_says(dir.file("agent.log"), "dropping observer 1 (observer2)", 40s))
      << agent_log();  // 10 s without a heartbeat
  std::this_thread::sleep_for(3s);
  ::kill(observers[1], SIGCONT);
  ASSERT_TRUE(log_says(dir.file("agent.log"), "observer 1 (observer2) is reachable again: readmitted", 40s))
      << agent_log();
  const int rows = count_lines(dir.file("metrics.csv"));
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), rows + 5, 60s)) << agent_log();
  ::kill(agent, SIGTERM);  // ends the run gracefully: the observers are told to finish
  EXPECT_EQ(procs.wait_exit(agent, 60s), 128 + SIGTERM) << agent_log();
  for (std::size_t i = 0; i < observers.size(); ++i)
    EXPECT_EQ(procs.wait_exit(observers[i], 30s), 0) << read_file(dir.file("obs" + std::to_string(i + 1) + ".log"));
  auto sum = read_summary(dir.file("summary.csv"));
  EXPECT_EQ(sum["observers_lost"], "0");
  EXPECT_EQ(sum["observers_readmitted"], "1");
  // The last rounds had both observers playing: two episodes each.
  std::ifstream metrics(dir.file("metrics.csv"));
  std::vector<long> episodes;
  for (std::string line; std::getline(metrics, line);)
    if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0])))
      episodes.push_back(std::stol(line.substr(line.find(',') + 1)));
  ASSERT_GE(episodes.size(), 2u);
  EXPECT_EQ(episodes.back() - episodes[episodes.size() - 2], 2) << "episodes in the last round";
  if (HasFailure()) ADD_FAILURE() << "the logs:\n" << agent_log();
}

// An agent that hangs (stopped, not dead: its connections stay open) is given up on after
// rpc.timeout_s, with a message that says what timed out.
TEST(RlFailureTest, ObserversGiveUpOnAHungAgentAfterTheTimeout) {
  TempDir dir;
  const std::vector<std::string> args{"--config",
                                      kConfig,
                                      "rpc.timeout_s=3",
                                      "learner.rounds=100000",
                                      "learner.learn=false",
                                      "run.out_dir=" + dir.path()};
  Spawned procs;
  const auto [agent, observers] = start_run(procs, dir, args);
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 3, 60s)) << read_file(dir.file("agent.log"));
  ::kill(agent, SIGSTOP);
  for (std::size_t i = 0; i < observers.size(); ++i) {
    const int code = procs.wait_exit(observers[i], 30s);  // 3 s timeout; 30 s still catches a hang
    const std::string log = read_file(dir.file("obs" + std::to_string(i + 1) + ".log"));
    EXPECT_EQ(code, 1) << log;
    EXPECT_NE(log.find("distrl-observer: "), std::string::npos) << log;
    EXPECT_TRUE(log.find("timed out") != std::string::npos ||
                log.find("no request from the agent") != std::string::npos)
        << log;
  }
  ::kill(agent, SIGCONT);  // Spawned kills it
}

// Issue 35: processes started with different world sizes are refused at once, each naming the
// other (before: the agent waited silently until killed, the observer blamed the agent after
// 10 s). The agent is left alone first until it says whom it waits for.
TEST(RlWorldTest, AWorldSizeMismatchIsRefusedAtOnceNamingBothProcesses) {
  TempDir dir;
  const std::vector<std::string> args{"--config", kConfig, "run.out_dir=" + dir.path()};
  Spawned procs;
  const pid_t agent = procs.start(tool("distrl-agent", args), dir.file("agent.log"), 0, 3, dir, "info");
  ASSERT_TRUE(log_says(dir.file("agent.log"), "waiting for ranks 1, 2: 1 of 3 joined"))
      << read_file(dir.file("agent.log"));
  const auto started = std::chrono::steady_clock::now();
  const pid_t observer = procs.start(tool("distrl-observer", args), dir.file("obs.log"), 1, 2, dir);
  EXPECT_NE(procs.wait_exit(observer, 30s), 0);
  EXPECT_NE(procs.wait_exit(agent, 30s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s) << "refused, but not at once";
  const std::string agent_log = read_file(dir.file("agent.log")), obs_log = read_file(dir.file("obs.log"));
  // The observer finds it (its world size against rank 0's record) and publishes it; the agent,
  // still waiting, refuses with the same words.
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  const std::string both = "world size mismatch: rank 1 ('observer1', pid " + std::to_string(observer) + " on " + host +
                           ") was started with world size 2, rank 0 ('agent', pid " + std::to_string(agent) + " on " +
                           host + ") with 3";
  EXPECT_NE(obs_log.find(both), std::string::npos) << obs_log;
  EXPECT_NE(agent_log.find(both), std::string::npos) << agent_log;
  EXPECT_NE(agent_log.find("found by another rank"), std::string::npos) << agent_log;
}

// ... and a second process started as a rank a live one holds is refused naming the holder,
// while the rest of the world goes on waiting for the rank that is really missing.
TEST(RlWorldTest, ASecondProcessAsOneRankIsRefusedNamingTheFirst) {
  TempDir dir;
  const std::vector<std::string> args{"--config", kConfig, "run.out_dir=" + dir.path()};
  Spawned procs;
  const pid_t agent = procs.start(tool("distrl-agent", args), dir.file("agent.log"), 0, 3, dir, "info");
  const pid_t first = procs.start(tool("distrl-observer", args), dir.file("obs1.log"), 1, 3, dir);
  ASSERT_TRUE(log_says(dir.file("agent.log"), "waiting for rank 2: 2 of 3 joined")) << read_file(dir.file("agent.log"));
  const pid_t second = procs.start(tool("distrl-observer", args), dir.file("obs1b.log"), 1, 3, dir);
  EXPECT_NE(procs.wait_exit(second, 20s), 0);
  const std::string log = read_file(dir.file("obs1b.log"));
  EXPECT_NE(log.find("rank 1 is taken: rank 1 ('observer1', pid " + std::to_string(first)), std::string::npos) << log;
  EXPECT_NE(log.find("pid " + std::to_string(second)), std::string::npos) << log;
  const std::size_t reports = read_file(dir.file("agent.log")).size();
  EXPECT_TRUE(log_says(dir.file("agent.log"), "waiting for rank 2: 2 of 3 joined", 20s, reports))  // and says so
      << read_file(dir.file("agent.log"));
  EXPECT_EQ(procs.wait_exit(agent, 0ms), -1) << "the agent should still wait for rank 2";
}

// Issue 35: two runs into one run.out_dir overwrote each other and both exited 0. The first
// run's launcher claims the directory; a second is refused naming it (launcher or a tool started
// by hand), --force too (it moves a finished run's outputs aside, never a live one's), and the
// claim ends with the run.
TEST(RlRunDirTest, ASecondRunIntoTheSameOutDirIsRefusedNamingTheFirst) {
  TempDir dir;
  const std::string common = "--config " + kConfig + " observers=1 learner.max_steps=30 run.out_dir=" + dir.path();
  distrl::testing::ChildProcess first(
      {distrl::testing::bin_path("distrl-launch"), "--config", kConfig, "observers=1", "learner.max_steps=30",
       "learner.rounds=100000", "learner.learn=false", "run.out_dir=" + dir.path()},
      dir.file("first.log"));
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 3, 60s)) << read_file(dir.file("first.log"));
  const std::string holder = "is in use by distrl-launch (pid " + std::to_string(first.pid()) + " on ";
  auto second = launch(common + " learner.rounds=2");
  EXPECT_EQ(second.code, 2) << second.output;
  EXPECT_NE(second.output.find("run.out_dir '" + dir.path() + "' " + holder), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("nothing started"), std::string::npos) << second.output;
  auto by_hand = distrl::testing::run_command("RANK=0 WORLD_SIZE=2 " + distrl::testing::bin_path("distrl-agent") + " " +
                                              common + " --init-method file://" + dir.file("rdv"));
  EXPECT_EQ(by_hand.code, 2) << by_hand.output;
  EXPECT_NE(by_hand.output.find(holder), std::string::npos) << by_hand.output;
  auto forced = launch("--force " + common + " learner.rounds=2");
  EXPECT_EQ(forced.code, 2) << forced.output;
  EXPECT_NE(forced.output.find(holder), std::string::npos) << forced.output;
  EXPECT_NE(forced.output.find("cannot take a directory a live run writes to"), std::string::npos) << forced.output;
  ::kill(first.pid(), SIGINT);
  EXPECT_EQ(first.wait_for(60s), 128 + SIGINT) << read_file(dir.file("first.log"));
  // The claim ended with the run (its lock file stays, naming a dead pid); its outputs stay too:
  // a fresh run there is refused naming them, --force moves them aside and starts.
  auto after = launch(common + " learner.rounds=2");
  EXPECT_EQ(after.code, 2) << after.output;
  EXPECT_NE(after.output.find("holds another run's outputs"), std::string::npos) << after.output;
  auto moved = launch("--force " + common + " learner.rounds=2");
  EXPECT_EQ(moved.code, 0) << moved.output;
  EXPECT_NE(moved.output.find("--force: moved the outputs of the run that was in " + dir.path()), std::string::npos)
      << moved.output;
}

// The socket files of this process's pid: ipc:// endpoints under /tmp, shared-memory ones under
// this uid's /tmp/distrl-u<uid>.
std::vector<std::string> ipc_files_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "distrl-" + std::to_string(pid) + "-";
  for (const std::string& dir : {std::string("/tmp"), "/tmp/distrl-u" + std::to_string(::geteuid())}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

// Issue 35: a process stopped by a signal before it joined removes its socket files (they were
// left in /tmp), and an observer with no run yet leaves at once on SIGTERM (it waited 20 s for
// an agent to end a run that never started).
TEST(RlWorldTest, ASignalBeforeTheRunLeavesNoFilesAndNoWait) {
  TempDir dir;
  const std::vector<std::string> args{"--config", kConfig, "run.out_dir=" + dir.path()};
  {
    Spawned procs;
    const pid_t alone = procs.start(tool("distrl-agent", args), dir.file("alone.log"), 0, 3, dir, "info");
    ASSERT_TRUE(log_says(dir.file("alone.log"), "waiting for ranks 1, 2")) << read_file(dir.file("alone.log"));
    EXPECT_FALSE(ipc_files_of(alone).empty()) << "no socket files to check";
    ::kill(alone, SIGTERM);
    EXPECT_EQ(procs.wait_exit(alone, 10s), 128 + SIGTERM);
    EXPECT_EQ(ipc_files_of(alone), std::vector<std::string>{});
  }
  std::filesystem::remove(dir.file("rendezvous"));
  Spawned procs;
  const pid_t agent = procs.start(tool("distrl-agent", args), dir.file("agent.log"), 0, 2, dir, "warn",
                                  {{"DISTRL_FAILPOINTS", "agent.hold_before_run"}});
  const pid_t observer = procs.start(tool("distrl-observer", args), dir.file("obs.log"), 1, 2, dir);
  ASSERT_TRUE(log_says(dir.file("agent.log"), "1 observer(s) joined")) << read_file(dir.file("agent.log"));
  // The agent's line comes when its own rendezvous ends; the observer's may end a moment later,
  // and a signal before its stop handlers are in ends it by the default action (exit 143, no
  // line). A second is far more than that moment.
  std::this_thread::sleep_for(1s);
  const auto sent = std::chrono::steady_clock::now();
  ::kill(observer, SIGTERM);
  EXPECT_EQ(procs.wait_exit(observer, 15s), 128 + SIGTERM) << read_file(dir.file("obs.log"));
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 5s);
  EXPECT_NE(read_file(dir.file("obs.log")).find("SIGTERM before the agent started a run; leaving"), std::string::npos)
      << read_file(dir.file("obs.log"));
  ::kill(agent, SIGKILL);
  procs.wait_exit(agent, 10s);
  for (const auto& f : ipc_files_of(agent)) std::filesystem::remove(f);  // SIGKILL cannot clean up
}

// Issue 35: a user's own environment, compiled against the headers alone into a shared library
// (examples/env_plugin/corridor.cpp), named in the config and loaded by the agent and every
// observer: PPO runs on it. A library that is not a plugin, one built against other headers,
// and a name the plugin lacks are refused before anything starts.
TEST(RlPluginTest, AnEnvironmentFromASharedLibraryTrainsUnderLaunch) {
  TempDir dir;
  const std::string ppo = "--config " + std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole_ppo.yaml";
  const std::string plugin = " env.plugin=" + std::string(DISTRL_PLUGIN) + " env.name=Corridor-v0";
  auto r = launch(ppo + plugin +
                  " learner.rounds=30 learner.target_reward=0.35 ppo.steps=32 env.per_observer=4 "
                  "run.out_dir=" +
                  dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("distrl-agent: Corridor-v0, batched"), std::string::npos) << r.output;
  EXPECT_GE(count_lines(dir.file("metrics.csv")), 2) << r.output;
  // The best return is 0.4 (6 steps of -0.1, then +1); walking at random rarely gets there in 50.
  EXPECT_NE(r.output.find("Solved after"), std::string::npos) << r.output;

  auto not_plugin = launch(ppo + " env.plugin=" + distrl::testing::bin_path("distrl-launch") + " env.name=X-v0");
  EXPECT_EQ(not_plugin.code, 2) << not_plugin.output;
  EXPECT_NE(not_plugin.output.find("cannot load it"), std::string::npos) << not_plugin.output;
  auto bad = launch(ppo + " env.plugin=" + std::string(DISTRL_BAD_PLUGIN) + " env.name=Never-v0");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("was built against environment headers of ABI 999 (distrl 9.9), this process has ABI"),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("nothing started"), std::string::npos) << bad.output;
  // Its names must be new: the same library under another path defines Corridor-v0 again.
  const std::string twin = dir.file("libtwin.so");
  std::filesystem::copy_file(DISTRL_PLUGIN, twin);
  EXPECT_NO_THROW(distrl::envs::load_env_plugin(DISTRL_PLUGIN));
  try {
    distrl::envs::load_env_plugin(twin);
    ADD_FAILURE() << "a plugin redefined Corridor-v0";
  } catch (const distrl::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("defines 'Corridor-v0', which is defined by env.plugin '" +
                                         std::string(DISTRL_PLUGIN) + "' already"),
              std::string::npos)
        << e.what();
  }
  auto missing = launch(ppo + plugin.substr(0, plugin.find(" env.name")) + " env.name=Corridor-v9");
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("env.name: 'Corridor-v9' is not one of: "), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("adds none by that name"), std::string::npos) << missing.output;
}

// gymnasium:ID: Gymnasium's own CartPole, stepped by Python children of every observer (and of
// the agent, for the spaces), trains under distrl-launch; the checkpoint then plays the native
// CartPole-v1. Skipped, saying why, without a reference Python that has gymnasium.
TEST(RlGymnasiumTest, GymnasiumsOwnEnvironmentTrainsUnderLaunch) {
  const char* ref = std::getenv("DISTRL_REFERENCE_PYTHON");
  if (!ref || !*ref) GTEST_SKIP() << "DISTRL_REFERENCE_PYTHON is not set (make test sets it)";
  ::setenv("DISTRL_GYMNASIUM_PYTHON", ref, 1);
  TempDir dir;
  const std::string ppo = "--config " + std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole_ppo.yaml";
  auto r = launch(ppo +
                  " env.name=gymnasium:CartPole-v1 env.per_observer=2 learner.rounds=6 learner.log_interval=1 "
                  "run.out_dir=" +
                  dir.path());
  if (r.output.find("no gymnasium") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("distrl-agent: gymnasium:CartPole-v1, batched"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(dir.file("metrics.csv")), 7) << r.output;  // the header and 6 rounds
  // The policy of Gymnasium's CartPole plays ours: the same spaces.
  auto eval = distrl::testing::run_command(distrl::testing::bin_path("distrl-agent") + " " + ppo +
                                           " --eval --episodes 2 --checkpoint " + dir.file("policy.pt") +
                                           " run.out_dir=" + dir.path() + " env.name=CartPole-v1");
  EXPECT_EQ(eval.code, 0) << eval.output;
  EXPECT_NE(eval.output.find("CartPole-v1, 2 episodes: mean return"), std::string::npos) << eval.output;
  // An ID Gymnasium does not know is refused before anything starts (--check-config asks it).
  auto unknown = launch(ppo + " env.name=gymnasium:Nope-v0 run.out_dir=" + dir.path() + "/unknown");
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("Gymnasium cannot make 'Nope-v0'"), std::string::npos) << unknown.output;
  EXPECT_NE(unknown.output.find("nothing started"), std::string::npos) << unknown.output;
  // A stop signal is the ranks': the Python children (in groups of their own) keep stepping
  // until the round ends and the run saves, instead of dying and taking the observers along.
  auto stopped = distrl::testing::launch_interrupted(
      ppo +
          " env.name=gymnasium:CartPole-v1 env.per_observer=2 learner.rounds=100000 learner.log_interval=1 "
          "run.out_dir=" +
          dir.path() + "/stopped",
      "] round     3", SIGTERM);
  EXPECT_EQ(stopped.code, 128 + SIGTERM) << stopped.output;
  EXPECT_NE(stopped.output.find("stopped by SIGTERM after round"), std::string::npos) << stopped.output;
  EXPECT_EQ(stopped.output.find("lost"), std::string::npos) << stopped.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("stopped/policy.pt"))) << stopped.output;
  ::unsetenv("DISTRL_GYMNASIUM_PYTHON");
}

// Checkpoints while a run goes on: every `learner.checkpoint_every` rounds, and on SIGUSR1.
TEST(RlCheckpointTest, SavedEveryNRoundsAndOnSigusr1) {
  for (const std::string every : {"0", "2"}) {
    SCOPED_TRACE("checkpoint_every=" + every);
    TempDir dir;
    const std::vector<std::string> args{"--config",
                                        kConfig,
                                        "learner.rounds=100000",
                                        "learner.max_steps=30",
                                        "learner.checkpoint_every=" + every,
                                        "run.out_dir=" + dir.path()};
    Spawned procs;
    const pid_t agent = start_run(procs, dir, args).agent;
    if (every == "0") {
      ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 4, 60s)) << read_file(dir.file("agent.log"));
      EXPECT_FALSE(std::filesystem::exists(dir.file("policy.pt"))) << "saved although checkpoint_every is 0";
      ::kill(agent, SIGUSR1);
    }
    EXPECT_TRUE(distrl::testing::wait_for_file(dir.file("policy.pt"), 60s)) << read_file(dir.file("agent.log"));
  }
}

// PPO over real processes: observers send fragments (discrete and continuous actions), the
// agent learns, saves, and evaluates the checkpoint alone.
TEST(PpoRunTest, FragmentsFlowForDiscreteAndContinuousEnvsAndEvalReadsTheCheckpoint) {
  const std::string ppo = std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole_ppo.yaml";
  TempDir dir;
  auto r = launch("--config " + ppo + " learner.rounds=4 ppo.steps=32 env.per_observer=4 run.out_dir=" + dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ppo (actor-critic)"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(dir.path() + "/metrics.csv"), 5);  // header + 4 rounds
  auto e = distrl::testing::run_command(distrl::testing::bin_path("distrl-agent") + " --config " + ppo +
                                        " --eval --episodes 3 --checkpoint " + dir.path() + "/policy.pt --render " +
                                        dir.path() + "/episode.gif 2>&1");
  EXPECT_EQ(e.code, 0) << e.output;
  EXPECT_NE(e.output.find("3 episodes: mean return"), std::string::npos) << e.output;
  EXPECT_EQ(e.output.find("resumed from"), std::string::npos) << e.output;  // an evaluation resumes nothing
  EXPECT_GT(std::filesystem::file_size(dir.path() + "/episode.gif"), 1000u);

  // Resumed, PPO carries its normalisers and solved window on: 2 more rounds, 6 rows in all.
  auto again =
      launch("--config " + ppo + " learner.rounds=6 ppo.steps=32 env.per_observer=4 run.out_dir=" + dir.path() +
             " --resume " + dir.path() + "/policy.pt");
  ASSERT_EQ(again.code, 0) << again.output;
  const auto at = again.output.find("at round 4 (");
  ASSERT_NE(at, std::string::npos) << again.output;
  const auto stats = again.output.find("observation statistics over ", at);
  ASSERT_NE(stats, std::string::npos) << again.output;
  // Every observation of 4 rounds x 2 observers x 4 envs x 32 steps went into the statistics.
  EXPECT_EQ(std::stoll(again.output.substr(stats + 28)), 4 * 2 * 4 * 32) << again.output;
  EXPECT_EQ(count_lines(dir.path() + "/metrics.csv"), 7);

  const std::string cont = std::string(DISTRL_SOURCE_DIR) + "/configs/lunarlander_continuous_ppo.yaml";
  TempDir dir2;
  r = launch("--config " + cont + " learner.rounds=2 ppo.steps=16 env.per_observer=2 run.out_dir=" + dir2.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(dir2.path() + "/metrics.csv"), 3);

  // REINFORCE cannot drive continuous actions: refused by name before anything starts.
  r = launch("--config " + cont + " learner.algo=reinforce run.out_dir=" + dir2.path());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("learner.algo=ppo"), std::string::npos) << r.output;
}

// Ctrl-C on a long run loses nothing (issue 14, case 6). distrl-launch passes the SIGINT on; the
// agent finishes its round, saves policy.pt and writes metrics, summary, config and plot; the
// observers serve until it has; the launcher exits 130. Before, the run was lost: exit 130 with
// an empty metrics.csv and no policy.pt.
TEST(RlSignalTest, CtrlCFinishesTheRoundSavesAndWritesEveryOutput) {
  TempDir dir;
  pid_t launcher = 0;
  int rounds = 0;
  auto r = distrl::testing::run_command(
      "echo PID $$; exec " + distrl::testing::bin_path("distrl-launch") + " --config " + kConfig +
          " observers=2 learner.rounds=100000 learner.max_steps=30 learner.log_interval=1 run.out_dir=" + dir.path(),
      [&](const std::string& line) {
        if (line.rfind("PID ", 0) == 0) launcher = std::stoi(line.substr(4));
        if (line.find("] round ") != std::string::npos && ++rounds == 5) ::kill(launcher, SIGINT);
      });
  EXPECT_EQ(r.code, 130) << r.output;
  EXPECT_NE(r.output.find("Stopped after"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped by SIGINT after round"), std::string::npos) << r.output;
  const int rows = count_lines(dir.file("metrics.csv")) - 1;
  EXPECT_GE(rows, 5);
  EXPECT_TRUE(std::filesystem::exists(dir.file("policy.pt")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("config.yaml")));
  const std::string summary = read_file(dir.file("summary.csv"));
  EXPECT_NE(summary.find("\n2,batched,1," + std::to_string(rows) + ","), std::string::npos) << summary;

  // The checkpoint is whole: a resumed run starts after the last saved round.
  auto again = launch("--config " + kConfig + " observers=2 learner.rounds=" + std::to_string(rows + 2) +
                      " learner.max_steps=30 run.out_dir=" + dir.path() + " --resume " + dir.file("policy.pt"));
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("at round " + std::to_string(rows) + " ("), std::string::npos) << again.output;
}

// A full disk while the agent saves (issue 14, case 5): before, LibTorch's writer threw from a
// destructor and the agent aborted (exit 134). Files here may grow to 6 KiB (RLIMIT_FSIZE,
// inherited by every process of the run): metrics.csv fits, policy.pt (~12 KiB) does not. The
// agent exits 1 naming the file and the reason, and the checkpoint from before stays loadable.
TEST(RlFailureTest, AFullDiskWhileSavingIsANamedErrorAndKeepsTheLastCheckpoint) {
  TempDir dir;
  const std::string run = "--config " + kConfig + " observers=1 learner.max_steps=20 run.out_dir=" + dir.path();
  auto first = launch(run + " learner.rounds=2");
  ASSERT_EQ(first.code, 0) << first.output;
  const std::string before = read_file(dir.file("policy.pt"));
  ASSERT_GT(before.size(), 6u << 10) << "the limit below must be smaller than a checkpoint";

  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 6 << 10;
  ::signal(SIGXFSZ, SIG_IGN);  // inherited: a write past the limit fails with EFBIG instead of killing
  ::setrlimit(RLIMIT_FSIZE, &small);
  auto full = launch(run + " learner.rounds=4 --resume " + dir.file("policy.pt"));
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, SIG_DFL);
  EXPECT_EQ(full.code, 1) << full.output;
  EXPECT_NE(full.output.find("distrl-agent: cannot write '" + dir.file("policy.pt") + "': File too large"),
            std::string::npos)
      << full.output;
  EXPECT_NE(full.output.find("the file there before is unchanged"), std::string::npos) << full.output;
  EXPECT_EQ(full.output.find("terminate called"), std::string::npos) << full.output;
  EXPECT_EQ(read_file(dir.file("policy.pt")), before);
  EXPECT_FALSE(std::filesystem::exists(dir.file("policy.pt.tmp")));
  auto eval = distrl::testing::run_command(distrl::testing::bin_path("distrl-agent") + " --config " + kConfig +
                                           " --eval --episodes 2 --checkpoint " + dir.file("policy.pt"));
  EXPECT_EQ(eval.code, 0) << eval.output;
}

}  // namespace

// ---------------------------------------------------------------- asynchronous learners (issue 44)

const std::string kAppo = std::string(DISTRL_SOURCE_DIR) + "/configs/cartpole_appo.yaml";

// metrics.csv's column `name` (header row 0) as numbers, one per round.
std::vector<double> metrics_column(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::stringstream hs(line);
  int at = -1, i = 0;
  for (std::string k; std::getline(hs, k, ','); ++i)
    if (k == name) at = i;
  std::vector<double> out;
  if (at < 0) return out;
  while (std::getline(in, line)) {
    std::stringstream rs(line);
    std::string v;
    for (int j = 0; j <= at; ++j) std::getline(rs, v, ',');
    out.push_back(std::stod(v));
  }
  return out;
}

// APPO and IMPALA (configs/cartpole_appo.yaml) solve CartPole with the observers acting on their
// own loops; every round's row carries the policy lag (at most 2 versions on average here, 0
// dropped), TensorBoard gets it too; a resume carries the policy version on.
TEST(AsyncRlTest, AppoAndImpalaSolveCartPoleWhileActingGoesOnAndAResumeCarriesTheVersion) {
  for (const std::string algo : {"appo", "impala"}) {
    TempDir dir;
    auto r = launch("--config " + kAppo + " learner.algo=" + algo + " run.out_dir=" + dir.path());
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find(algo + " (asynchronous actor-critic, V-trace)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("Solved after"), std::string::npos) << algo << "\n" << r.output;
    EXPECT_NE(r.output.find("  lag "), std::string::npos) << r.output;
    const auto lag = metrics_column(dir.file("metrics.csv"), "lag_mean");
    const auto dropped = metrics_column(dir.file("metrics.csv"), "dropped");
    ASSERT_FALSE(lag.empty()) << read_file(dir.file("metrics.csv"));
    double sum = 0;
    for (double l : lag) sum += l;
    EXPECT_LE(sum / static_cast<double>(lag.size()), 2.0) << algo;
    EXPECT_EQ(dropped.back(), 0) << algo;
    const auto events = distrl::testing::read_tfevents(dir.path());
    if (events.ran) {
      EXPECT_EQ(events.points("lag/mean"), static_cast<int>(lag.size())) << events.out;
    }
  }
  TempDir dir;
  const std::string run = "--config " + kAppo + " learner.target_reward=100000 run.out_dir=" + dir.path();
  auto first = launch(run + " learner.rounds=20");
  ASSERT_EQ(first.code, 0) << first.output;
  auto again = launch(run + " learner.rounds=30 --resume " + dir.file("policy.pt"));
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("at round 20 ("), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("policy version 20,"), std::string::npos) << again.output;
  EXPECT_EQ(count_lines(dir.file("metrics.csv")), 31);
}

// A streaming observer that dies: the agent names it, its envs leave the batch and the learner
// goes on with the other's trajectories; a stop then ends the run as usual, and summary.csv
// counts the observer lost.
TEST(AsyncRlTest, AKilledObserverIsNamedAndTheLearnerGoesOnWithTheOther) {
  TempDir dir;
  const std::vector<std::string> args{"--config",
                                      kAppo,
                                      "rpc.timeout_s=10",
                                      "learner.rounds=100000",
                                      "learner.target_reward=100000",
                                      "learner.log_interval=1",
                                      "run.out_dir=" + dir.path()};
  Spawned procs;
  const auto [agent, observers] = start_run(procs, dir, args);
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), 20, 60s)) << read_file(dir.file("agent.log"));
  ::kill(observers[1], SIGKILL);
  EXPECT_EQ(procs.wait_exit(observers[1], 10s), 128 + SIGKILL);
  ASSERT_TRUE(log_says(dir.file("agent.log"), "dropping observer 1 (observer2)")) << read_file(dir.file("agent.log"));
  const int rows = count_lines(dir.file("metrics.csv"));
  ASSERT_TRUE(wait_for_rows(dir.file("metrics.csv"), rows + 30, 60s)) << read_file(dir.file("agent.log"));
  ::kill(agent, SIGINT);
  EXPECT_EQ(procs.wait_exit(agent, 60s), 130) << read_file(dir.file("agent.log"));
  EXPECT_EQ(procs.wait_exit(observers[0], 30s), 0) << read_file(dir.file("obs1.log"));
  auto sum = read_summary(dir.file("summary.csv"));
  EXPECT_EQ(sum["observers_lost"], "1");
  EXPECT_TRUE(std::filesystem::exists(dir.file("policy.pt")));
}

// roles.learners 1: the learner in its own process (distrl-learner, the world's last rank)
// solves CartPole too. Killed mid-run (SIGKILL), the agent names it and goes on acting, counting
// what went unlearned; launch.max_restarts starts it again, it resumes from its last
// checkpoint (learner.pt, every 20 steps here) and the run still solves.
TEST(AsyncRlTest, TheLearnerInItsOwnProcessSolvesAndAKilledOneResumesFromItsCheckpoint) {
  TempDir dir;
  bool killed = false;
  auto r = launch("--config " + kAppo +
                      " roles.learners=1 launch.max_restarts=1 learner.checkpoint_every=20 "
                      "learner.log_interval=5 rpc.timeout_s=20 run.out_dir=" +
                      dir.path(),
                  [&](const std::string& line) {
                    // "[3] learner: update 50 ..." (every 10 x log_interval steps): checkpoints at 20 and 40 exist.
                    if (!killed && line.find("] learner: update 50 ") != std::string::npos) {
                      killed = true;
                      (void)!std::system(("pkill -KILL -f 'distrl-learner .*" + dir.path() + "'").c_str());
                    }
                  });
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(killed) << r.output;
  EXPECT_NE(r.output.find("2 observer(s) and 1 learner process joined"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("trajectories: 0 dropped"), std::string::npos) << r.output;  // the unlearned are counted
  EXPECT_NE(r.output.find("Solved after"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("agent: the learner cannot be reached"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("learner: resumed from " + dir.file("learner.pt") + " at policy version "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("agent: the learner is back after"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("learner.pt")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("policy.pt")));
}

// roles.agents 2: two agents (inference servers, ranks 0 and 1), each serving its own observer,
// feed one learner process. The first whose running reward reaches the target ends the run,
// and the learner tells the other to stop; agent 1 writes under OUT_DIR/agent1. Several agents
// without a learner process are refused by name.
TEST(AsyncRlTest, TwoAgentsFeedOneLearnerProcessAndTheFirstToSolveEndsTheRun) {
  TempDir dir;
  auto r = launch("--config " + kAppo + " roles.agents=2 roles.learners=1 observers=2 run.out_dir=" + dir.path());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[0] distrl-agent: 1 observer(s) and 1 learner process joined"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[1] distrl-agent: 1 observer(s) and 1 learner process joined"), std::string::npos)
      << r.output;
  // Each agent solved, or was told to stop by the learner once the other had (they share one
  // policy, so both may solve in the same moment).
  int solved = 0;
  for (const std::string rank : {"[0] ", "[1] "}) {
    const bool own = r.output.find(rank + "Solved after") != std::string::npos;
    const auto stopped = r.output.find(rank + "Stopped after");
    const bool told = stopped != std::string::npos &&
                      r.output.substr(stopped, r.output.find('\n', stopped) - stopped)
                              .find("another agent's run ended (the learner process said stop)") != std::string::npos;
    EXPECT_TRUE(own || told) << rank << "\n" << r.output;
    solved += own ? 1 : 0;
  }
  EXPECT_GE(solved, 1) << r.output;
  EXPECT_NE(r.output.find("'s run is over; the other agents are told to stop"), std::string::npos) << r.output;
  for (const std::string& out : {dir.path(), dir.file("agent1")}) {
    EXPECT_GT(count_lines(out + "/metrics.csv"), 5) << out;
    EXPECT_TRUE(std::filesystem::exists(out + "/policy.pt")) << out;
  }
  EXPECT_TRUE(std::filesystem::exists(dir.file("learner.pt")));
  // Both agents fed the one learner: it learned more steps than either agent's rounds alone.
  const int rounds0 = count_lines(dir.file("metrics.csv")) - 1,
            rounds1 = count_lines(dir.file("agent1/metrics.csv")) - 1;
  const auto at = r.output.find(" updates, policy version ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const auto from = r.output.rfind("learner: ", at) + 9;
  const int updates = std::stoi(r.output.substr(from, at - from));
  EXPECT_GT(updates, std::max(rounds0, rounds1)) << r.output;
  EXPECT_LE(updates, rounds0 + rounds1) << r.output;

  TempDir other;
  r = launch("--config " + kAppo + " roles.agents=2 run.out_dir=" + other.path());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("set roles.learners: 1"), std::string::npos) << r.output;
  r = launch("--config " + kAppo + " roles.agents=3 roles.learners=1 observers=2 run.out_dir=" + other.path());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("every agent needs at least one"), std::string::npos) << r.output;
}

// --resume with roles.agents 2: `--resume OUT_DIR/policy.pt` names agent 0's checkpoint; agent 1
// resumes from its own (OUT_DIR/agent1/policy.pt) and the learner from OUT_DIR/learner.pt, each
// counting on from where it was.
TEST(AsyncRlTest, TwoAgentsAndTheLearnerResumeEachFromItsOwnCheckpoint) {
  TempDir dir;
  const std::string run = "--config " + kAppo +
                          " roles.agents=2 roles.learners=1 observers=2 "
                          "learner.target_reward=100000 run.out_dir=" +
                          dir.path();
  auto r = launch(run + " learner.rounds=30");
  ASSERT_EQ(r.code, 0) << r.output;
  // The first agent through its 30 rounds ends the run; the other may stop before.
  const int rounds0 = count_lines(dir.file("metrics.csv")) - 1,
            rounds1 = count_lines(dir.file("agent1/metrics.csv")) - 1;
  ASSERT_TRUE(rounds0 == 30 || rounds1 == 30) << r.output;
  r = launch(run + " learner.rounds=60 --resume " + dir.file("policy.pt"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[0] agent: resumed from " + dir.file("policy.pt") + " at round " + std::to_string(rounds0)),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("[1] agent: resumed from " + dir.file("agent1/policy.pt") + " at round " + std::to_string(rounds1)),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("learner: resumed from " + dir.file("learner.pt")), std::string::npos) << r.output;
  EXPECT_GT(count_lines(dir.file("agent1/metrics.csv")) - 1, rounds1);  // it counted on
}

// The pid of the running `exe` whose command line holds `needle` and whose environment says
// RANK=rank (distrl-launch's ranks), or 0.
pid_t find_rank(const std::string& exe, const std::string& needle, int rank) {
  const auto read_all = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const std::string cmd = read_all(e.path() / "cmdline");
    if (cmd.find(exe) == std::string::npos || cmd.find(needle) == std::string::npos) continue;
    const std::string env = '\0' + read_all(e.path() / "environ");
    const std::string want = std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0';
    if (env.find(want) != std::string::npos) return std::stoi(name);
  }
  return 0;
}

// roles.learners 1, the learner stopped (SIGSTOP: its connections stay open, nothing answers):
// the agent's learn call is bounded (the heartbeat reports the learner down after 10 s, well
// inside rpc.timeout_s), the agent names it and goes on acting (rounds go on, the batches
// counted unlearned); SIGCONT once a round has passed without it: the learner is back and the
// run solves.
TEST(AsyncRlTest, AStoppedLearnerIsNamedActingGoesOnAndItIsTakenBackWhenItRunsAgain) {
  TempDir dir;
  pid_t learner = 0;
  bool unreachable = false, continued = false;
  std::chrono::steady_clock::time_point stopped, named;
  auto r = launch(
      "--config " + kAppo + " roles.learners=1 learner.log_interval=5 rpc.timeout_s=60 run.out_dir=" + dir.path(),
      [&](const std::string& line) {
        if (!learner && line.rfind("[0] round    20 ", 0) == 0) {
          learner = find_rank("distrl-learner", dir.path(), 3);
          if (learner) ::kill(learner, SIGSTOP);
          stopped = std::chrono::steady_clock::now();
        } else if (learner && !unreachable && line.find("agent: the learner cannot be reached") != std::string::npos) {
          unreachable = true;
          named = std::chrono::steady_clock::now();
        } else if (unreachable && !continued && line.rfind("[0] round ", 0) == 0) {
          continued = true;  // a round passed while the learner was stopped
          ::kill(learner, SIGCONT);
        }
      });
  if (learner && !continued) ::kill(learner, SIGCONT);
  ASSERT_TRUE(learner) << r.output;
  ASSERT_TRUE(continued) << r.output;
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_LT(named - stopped, std::chrono::seconds(30))
      << "the heartbeat (10 s), not rpc.timeout_s (60 s), ends the call";
  EXPECT_NE(r.output.find("agent: the learner is back after"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Solved after"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("trajectories: 0 dropped"), std::string::npos) << r.output;  // the unlearned are counted
}

// roles.agents 2, agent 1 killed mid-run (SIGKILL): its observer leaves, naming it lost;
// distrl-launch goes on without both (and marks them gone, so no shutdown waits for them); the
// learner names the agent and goes on with agent 0's batches; agent 0 runs all its rounds and
// the launch exits 0, saying which ranks it finished without.
TEST(AsyncRlTest, AKilledAgentIsNamedAndTheLearnerGoesOnWithTheOther) {
  TempDir dir;
  bool killed = false;
  auto r = launch("--config " + kAppo +
                      " roles.agents=2 roles.learners=1 observers=2 learner.rounds=300 "
                      "learner.target_reward=100000 run.out_dir=" +
                      dir.path(),
                  [&](const std::string& line) {
                    if (killed || line.rfind("[0] round ", 0) != 0) return;
                    if (std::atoi(line.c_str() + 10) < 50) return;
                    killed = true;
                    if (const pid_t agent1 = find_rank("distrl-agent", dir.path(), 1)) ::kill(agent1, SIGKILL);
                  });
  ASSERT_TRUE(killed) << r.output;
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("distrl-launch: rank 1 exited with code 137; the run goes on without it"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("distrl-launch: rank 3 exited with code 1; the run goes on without it"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("learner: agent1 (rank 1) is gone; learning goes on with the other agents' batches"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[0] Stopped after 300 rounds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the run finished without 2 ranks that exited with an error"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(dir.file("metrics.csv")), 301);
  EXPECT_TRUE(std::filesystem::exists(dir.file("learner.pt")));
}

// learner.device names where APPO/IMPALA's learner trains; a CUDA one on a machine or build
// without CUDA is refused before anything starts, naming the key; so is learner.device for a
// synchronous learner (it learns where it acts), a learner process for one, and a queue smaller
// than a batch. With roles.learners 1, distrl-learner refuses a device it does not have.
TEST(AsyncRlTest, ALearnerDeviceOrQueueThatCannotWorkIsRefusedByName) {
  TempDir dir;
  auto r = launch("--config " + kAppo + " learner.device=cuda run.out_dir=" + dir.path());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("learner.device 'cuda'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--learner.device cpu"), std::string::npos) << r.output;
  r = launch("--config " + kAppo + " learner.algo=ppo learner.device=cpu run.out_dir=" + dir.path());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("learner.device is for appo and impala"), std::string::npos) << r.output;
  r = launch("--config " + kAppo + " learner.algo=ppo roles.learners=1 run.out_dir=" + dir.path());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a learner process is for appo and impala"), std::string::npos) << r.output;
  // The learner process checks its own device, on its own host: there the run stops.
  TempDir elsewhere;  // this run starts the agent, which claims its directory
  r = launch("--config " + kAppo + " roles.learners=1 learner.device=cuda run.out_dir=" + elsewhere.path());
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("distrl-learner: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("learner.device 'cuda'"), std::string::npos) << r.output;
  r = launch("--config " + kAppo + " async.batch=4 async.queue=2 run.out_dir=" + dir.path());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("the queue must hold a whole batch"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("metrics.csv")));
  // learner.device cpu beside agent.device cpu is the default's twin: the run goes.
  r = launch("--config " + kAppo + " learner.device=cpu learner.rounds=5 run.out_dir=" + dir.path());
  EXPECT_EQ(r.code, 0) << r.output;
}
