// Two hosts, really: the agent and its observers (and the two ranks of a DDP process group) run
// in two network namespaces joined by a veth pair, tcp only (no ipc, no loopback between them),
// started the way a cluster starts them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The link
// is cut mid-run: every process on both sides fails within the configured timeout with an error
// naming the peer it lost, after saving what it had; the link restored, a resumed run finishes.
//
// Needs root (CAP_NET_ADMIN) and iproute2 (`make deps` installs it); skips saying why otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/command.h"
#include "tests/support/multiproc.h"

namespace {

using namespace std::chrono_literals;
using distrl::testing::bin_path;
using distrl::testing::read_file;
using distrl::testing::run_command;
using distrl::testing::TempDir;
using Clock = std::chrono::steady_clock;

const std::string kSource = DISTRL_SOURCE_DIR;

using Process = distrl::testing::ChildProcess;

// Two namespaces "hosts" A (10.77.0.1) and B (10.77.0.2), one veth pair between them. The
// names carry this process's pid so that parallel test processes never share one.
class TwoHostsTest : public ::testing::Test {
 protected:
  static constexpr const char* kAddrA = "10.77.0.1";
  static constexpr const char* kAddrB = "10.77.0.2";

  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "creating network namespaces needs root (CAP_NET_ADMIN); run the suite as root to test two hosts";
    if (run_command("ip -V").code != 0) GTEST_SKIP() << "no `ip` command (iproute2): `make deps` installs it";
    const std::string id = std::to_string(::getpid());
    ns_a_ = "distrl-a-" + id;
    ns_b_ = "distrl-b-" + id;
    veth_a_ = "dva" + id;  // interface names: at most 15 characters
    const std::string veth_b = "dvb" + id;
    for (const std::string& cmd :
         {"ip netns add " + ns_a_, "ip netns add " + ns_b_, "ip link add " + veth_a_ + " type veth peer name " + veth_b,
          "ip link set " + veth_a_ + " netns " + ns_a_, "ip link set " + veth_b + " netns " + ns_b_,
          "ip -n " + ns_a_ + " addr add " + kAddrA + "/24 dev " + veth_a_,
          "ip -n " + ns_b_ + " addr add " + kAddrB + "/24 dev " + veth_b, "ip -n " + ns_a_ + " link set lo up",
          "ip -n " + ns_b_ + " link set lo up", "ip -n " + ns_a_ + " link set " + veth_a_ + " up",
          "ip -n " + ns_b_ + " link set " + veth_b + " up"}) {
      auto r = run_command(cmd);  // TearDown removes what was made before a failure
      if (r.code != 0) GTEST_SKIP() << "cannot make two hosts here: `" << cmd << "` failed: " << r.output;
    }
  }

  void TearDown() override {
    for (const std::string& ns : {ns_a_, ns_b_})
      if (!ns.empty()) {
        run_command("ip netns pids " + ns + " | xargs -r kill -9");
        run_command("ip netns del " + ns);  // takes the veth pair with it
      }
  }

  // The link goes down (both ends lose carrier: packets are dropped, nothing is reset, as when a
  // cable or a switch fails) or comes back.
  void set_link(bool up) {
    auto r = run_command("ip -n " + ns_a_ + " link set " + veth_a_ + (up ? " up" : " down"));
    ASSERT_EQ(r.code, 0) << r.output;
  }

  // `env [VAR=VALUE...] CMD` on host A or B, at info level (the suite runs at warn), output to log.
  std::unique_ptr<Process> on_host(bool on_a, const std::string& env_and_cmd, const std::string& log) {
    return std::make_unique<Process>(
        Process::shell("ip netns exec " + (on_a ? ns_a_ : ns_b_) + " env DISTRL_LOG_LEVEL=info " + env_and_cmd), log);
  }

  // `distrl-launch --node-rank K ARGS` on host A (K = 0) and on host B (K = 1), logs in dir.
  std::vector<std::unique_ptr<Process>> launch_on_both(const std::string& args, const TempDir& dir) {
    std::vector<std::unique_ptr<Process>> ps;
    for (int node = 0; node < 2; ++node)
      ps.push_back(on_host(node == 0, bin_path("distrl-launch") + " --node-rank " + std::to_string(node) + " " + args,
                           dir.file("node" + std::to_string(node) + ".log")));
    return ps;
  }

  // CMD on host A or B as rank `rank` of `world`, the store on A at `port`.
  std::unique_ptr<Process> start(bool on_a, int rank, int world, int port, const std::string& cmd,
                                 const std::string& log) {
    return on_host(on_a,
                   "RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(world) + " MASTER_ADDR=" + kAddrA +
                       " MASTER_PORT=" + std::to_string(port) + " " + cmd,
                   log);
  }

  // Ranks 0-1 on host A and 2-3 on host B, started one by one (no launcher stops the others), each
  // running distrl-bench's all_reduce worker (1 MiB, hierarchical) with `failpoints` armed.
  std::vector<std::unique_ptr<Process>> hierarchical_all_reduces(TempDir& dir, int port,
                                                                 const std::string& failpoints) {
    std::vector<std::unique_ptr<Process>> ps;
    for (int rank = 0; rank < 4; ++rank)
      ps.push_back(start(rank < 2, rank, 4, port,
                         "DISTRL_FAILPOINTS=" + failpoints + " " + bin_path("distrl-bench") +
                             " allreduce-worker --out " + dir.file("times.csv") + " 1048576",
                         dir.file("rank" + std::to_string(rank) + ".log")));
    return ps;
  }

  // Once `text` appears in the first process's output, cuts the link and waits (at most 60 s)
  // until every process has exited: their codes in `codes`, the seconds it took returned.
  double cut_when(std::vector<std::unique_ptr<Process>>& run, const std::string& text, std::vector<int>* codes);

  std::string ns_a_, ns_b_, veth_a_;
};

// Waits until `text` appears in p's output; false at the deadline or when p exits first.
bool wait_for_output(Process& p, const std::string& text, std::chrono::seconds deadline) {
  const auto until = Clock::now() + deadline;
  while (Clock::now() < until) {
    if (p.output().find(text) != std::string::npos) return true;
    if (p.wait_until(Clock::now())) return p.output().find(text) != std::string::npos;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Seconds until every process has exited (their codes in `codes`), at most `deadline`.
double wait_all(std::vector<std::unique_ptr<Process>>& ps, std::chrono::seconds deadline, std::vector<int>* codes) {
  const auto start = Clock::now();
  for (auto& p : ps) codes->push_back(p->wait_until(start + deadline).value_or(-1));
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string all_output(const std::vector<std::unique_ptr<Process>>& ps) {
  std::string out;
  for (std::size_t i = 0; i < ps.size(); ++i) out += "--- process " + std::to_string(i) + ":\n" + ps[i]->output();
  return out;
}

double TwoHostsTest::cut_when(std::vector<std::unique_ptr<Process>>& run, const std::string& text,
                              std::vector<int>* codes) {
  if (!wait_for_output(*run[0], text, 180s)) {
    ADD_FAILURE() << "no '" << text << "' within 180 s:\n" << all_output(run);
    return -1;
  }
  set_link(false);
  const double seconds = wait_all(run, 60s, codes);
  std::cout << "link cut: every process exited after " << seconds << " s" << std::endl;
  return seconds;
}

// Waits for every process (60 s at most): each exits with its code in `codes`, and all of them
// within 30 s (the group's timeout is 120 s: nobody waited it out). `what` names the case.
void expect_exits_within_30s(std::vector<std::unique_ptr<Process>>& ps, const std::vector<int>& codes,
                             const std::string& what) {
  std::vector<int> got;
  const double seconds = wait_all(ps, 60s, &got);
  std::cout << what << ": every process exited after " << seconds << " s" << std::endl;
  EXPECT_EQ(got, codes) << all_output(ps);
  EXPECT_LT(seconds, 30) << all_output(ps);
}

// The agent on A, two observers on B. Cut: within rpc.timeout_s the agent drops both observers
// (naming them and the address it lost), saves the checkpoint of the last finished round and
// exits 1 saying how to resume; each observer exits 1 naming the agent. Restored: the resumed
// run counts on from that round and finishes.
TEST_F(TwoHostsTest, AgentAndObserversFailNamingEachOtherWhenTheLinkIsCutAndAResumedRunFinishes) {
  TempDir dir;
  const std::string common =
      "--config " + kSource + "/configs/cartpole.yaml observers=2 rpc.transport=tcp " +
      "rpc.timeout_s=30 learner.target_reward=1000 learner.log_interval=5 run.out_dir=" + dir.path();
  auto world = [&](int port, const std::string& args, const std::string& tag) {  // observers ignore --resume
    std::vector<std::unique_ptr<Process>> ps;
    ps.push_back(
        start(true, 0, 3, port, bin_path("distrl-agent") + " " + common + " " + args, dir.file(tag + "-agent.log")));
    for (int r = 1; r <= 2; ++r)
      ps.push_back(start(false, r, 3, port, bin_path("distrl-observer") + " " + common + " " + args,
                         dir.file(tag + "-observer" + std::to_string(r) + ".log")));
    return ps;
  };

  auto run1 = world(29500, "learner.rounds=100000", "run1");
  std::vector<int> codes;
  const double seconds = cut_when(run1, "round    20 ", &codes);
  ASSERT_GE(seconds, 0);
  const std::string agent = run1[0]->output();
  EXPECT_EQ(codes, (std::vector<int>{1, 1, 1})) << all_output(run1);
  EXPECT_LT(seconds, 30) << "rpc.timeout_s is 30";
  for (const char* name :
       {"dropping observer 0 (observer1)", "dropping observer 1 (observer2)", "every observer is gone",
        "lost (the process exited or crashed, or its host became unreachable)", "tcp://10.77.0.2:"})
    EXPECT_NE(agent.find(name), std::string::npos) << "agent output lacks '" << name << "':\n" << agent;
  for (int r = 1; r <= 2; ++r) {
    const std::string obs = run1[r]->output();
    EXPECT_NE(obs.find("lost the agent"), std::string::npos) << obs;
    EXPECT_NE(obs.find("tcp://10.77.0.1:"), std::string::npos) << obs;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(agent, m,
                                std::regex("the checkpoint holds round ([0-9]+) \\(go on once the observers can reach "
                                           "the agent: .* --resume ([^ )]+)\\)")))
      << agent;
  const int saved = std::stoi(m[1]);
  EXPECT_GE(saved, 20);
  EXPECT_EQ(m[2].str(), dir.file("policy.pt"));

  set_link(true);
  auto run2 =
      world(29501, "learner.rounds=" + std::to_string(saved + 5) + " --resume " + dir.file("policy.pt"), "run2");
  codes.clear();
  wait_all(run2, 120s, &codes);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0})) << all_output(run2);
  EXPECT_NE(run2[0]->output().find("resumed from " + dir.file("policy.pt") + " at round " + std::to_string(saved)),
            std::string::npos)
      << run2[0]->output();
  EXPECT_NE(run2[0]->output().find("ran all " + std::to_string(saved + 5) + " rounds"), std::string::npos)
      << run2[0]->output();
}

// DDP (distrl-train, the 2-rank zmq process group) with rank 0 on A and rank 1 on B. Cut: both
// ranks' all_reduce fails within dist.timeout_s naming the other rank and its address; each
// saved its checkpoint every epoch. Restored: a resumed run finishes.
TEST_F(TwoHostsTest, AProcessGroupFailsNamingThePeerWhenTheLinkIsCutAndAResumedRunFinishes) {
  TempDir dir;
  const std::string common = "--config " + kSource + "/configs/ddp_toy.yaml dist.transport=tcp dist.timeout_s=30 " +
                             "checkpoint.every=1 run.out_dir=" + dir.path();
  auto world = [&](int port, const std::string& args, const std::string& tag) {
    std::vector<std::unique_ptr<Process>> ps;
    for (int r = 0; r < 2; ++r)
      ps.push_back(start(r == 0, r, 2, port, bin_path("distrl-train") + " " + common + " " + args,
                         dir.file(tag + "-rank" + std::to_string(r) + ".log")));
    return ps;
  };

  auto run1 = world(29510, "train.epochs=100000", "run1");
  std::vector<int> codes;
  const double seconds = cut_when(run1, "epoch 20/100000:", &codes);
  ASSERT_GE(seconds, 0);
  EXPECT_EQ(codes, (std::vector<int>{1, 1})) << all_output(run1);
  EXPECT_LT(seconds, 30) << "dist.timeout_s is 30";
  EXPECT_TRUE(std::regex_search(run1[0]->output(),
                                std::regex("on rank 0: rank 1 is gone \\(connection to tcp://10\\.77\\.0\\.2:")))
      << run1[0]->output();
  EXPECT_TRUE(std::regex_search(run1[1]->output(),
                                std::regex("on rank 1: rank 0 is gone \\(connection to tcp://10\\.77\\.0\\.1:")))
      << run1[1]->output();
  const std::string out0 = run1[0]->output();
  const std::regex saved_line("checkpoint " + dir.file("checkpoint.pt") + " \\(epoch ([0-9]+)\\)");
  int saved = 0;  // the last epoch saved
  for (auto it = std::sregex_iterator(out0.begin(), out0.end(), saved_line); it != std::sregex_iterator(); ++it)
    saved = std::stoi((*it)[1]);
  EXPECT_GE(saved, 20) << out0;

  set_link(true);
  auto run2 =
      world(29511, "train.epochs=" + std::to_string(saved + 2) + " --resume " + dir.file("checkpoint.pt"), "run2");
  codes.clear();
  wait_all(run2, 120s, &codes);
  EXPECT_EQ(codes, (std::vector<int>{0, 0})) << all_output(run2);
  EXPECT_NE(run2[0]->output().find("epoch " + std::to_string(saved + 2) + "/" + std::to_string(saved + 2) + ":"),
            std::string::npos)
      << run2[0]->output();
}

// The train loss distrl-train printed for `epoch` of `epochs` (-1 when absent).
double train_loss(const std::string& out, int epoch, int epochs) {
  std::smatch m;
  const std::regex line("epoch " + std::to_string(epoch) + "/" + std::to_string(epochs) + ": train loss ([0-9.]+)");
  return std::regex_search(out, m, line) ? std::stod(m[1]) : -1;
}

// DDP on 2 hosts x 2 ranks (transport auto): all_reduce runs hierarchically -- inside each host
// in shared memory, between the two host leaders over tcp. The run learns as the same 4 ranks
// do on one host with one flat all_reduce: its losses match that run's to float32 rounding (the
// sums are added in another order), and they fall.
TEST_F(TwoHostsTest, DdpAcrossTwoHostsReducesInsideEachHostInSharedMemory) {
  TempDir dir;
  const std::string config = "--config " + kSource + "/configs/ddp_toy.yaml dist.world_size=4 train.epochs=3 ";
  std::vector<std::unique_ptr<Process>> ps =
      launch_on_both("--nnodes 2 --master-addr " + std::string(kAddrA) + " --master-port 29524 " + config +
                         "run.out_dir=" + dir.file("two"),
                     dir);
  std::vector<std::unique_ptr<Process>> one;
  one.push_back(
      on_host(true, bin_path("distrl-launch") + " " + config + "run.out_dir=" + dir.file("one"), dir.file("one.log")));
  std::vector<int> codes;
  wait_all(ps, 180s, &codes);
  wait_all(one, 180s, &codes);
  ASSERT_EQ(codes, (std::vector<int>{0, 0, 0})) << all_output(ps) << one[0]->output();
  const std::string a = ps[0]->output(), b = ps[1]->output();
  for (const char* line : {"rank 0: all_reduce across 2 hosts (2, 2 ranks): inside this host (ranks 0-1) over shared "
                           "memory, between the host leaders (ranks 0, 2) over ZeroMQ",
                           "rank 1: all_reduce across 2 hosts (2, 2 ranks): inside this host (ranks 0-1) over shared "
                           "memory"})
    EXPECT_NE(a.find(line), std::string::npos) << "host A's output lacks '" << line << "':\n" << a;
  EXPECT_NE(b.find("rank 2: all_reduce across 2 hosts (2, 2 ranks): inside this host (ranks 2-3) over shared memory"),
            std::string::npos)
      << b;
  // The group's own link, chosen per pair as RPC's is: shared memory inside each host.
  for (const char* line : {"process group: rank 0 reaches ranks 0-1 over shared memory, ranks 2-3 over ZeroMQ",
                           "process group: rank 1 reaches ranks 0-1 over shared memory, ranks 2-3 over ZeroMQ"})
    EXPECT_NE(a.find(line), std::string::npos) << "host A's output lacks '" << line << "':\n" << a;
  EXPECT_NE(b.find("process group: rank 3 reaches ranks 2-3 over shared memory, ranks 0-1 over ZeroMQ"),
            std::string::npos)
      << b;
  EXPECT_EQ(one[0]->output().find("all_reduce across"), std::string::npos) << "one host: one flat all_reduce";
  for (int epoch = 1; epoch <= 3; ++epoch) {
    const double two_hosts = train_loss(a, epoch, 3), one_host = train_loss(one[0]->output(), epoch, 3);
    ASSERT_GT(two_hosts, 0) << a;
    EXPECT_NEAR(two_hosts, one_host, 1e-3 * one_host) << "epoch " << epoch;
  }
  EXPECT_LT(train_loss(a, 3, 3), train_loss(a, 1, 3)) << a;
}

// The hierarchical all_reduce's sums and averages are exact (distrl-bench's allreduce worker
// checks every element; it exits 1 naming a wrong one) at a size that takes recursive doubling
// between the leaders and one that takes the ring, on 2 hosts x 2 ranks and on 2 hosts x 3.
TEST_F(TwoHostsTest, HierarchicalAllReduceSumsAndAveragesExactly) {
  TempDir dir;
  for (int per_host : {2, 3}) {
    std::vector<std::unique_ptr<Process>> ps;
    for (int node = 0; node < 2; ++node)
      ps.push_back(on_host(node == 0,
                           bin_path("distrl-launch") + " --nnodes 2 --node-rank " + std::to_string(node) + " --nproc " +
                               std::to_string(per_host) + " --master-addr " + kAddrA + " --master-port " +
                               std::to_string(29530 + per_host) + " -- " + bin_path("distrl-bench") +
                               " allreduce-worker --out " + dir.file("times.csv") + " 4096 4194304",
                           dir.file("node" + std::to_string(node) + ".log")));
    std::vector<int> codes;
    wait_all(ps, 180s, &codes);
    EXPECT_EQ(codes, (std::vector<int>{0, 0})) << per_host << " ranks per host:\n" << all_output(ps);
    EXPECT_NE(ps[0]->output().find("all_reduce across 2 hosts"), std::string::npos) << ps[0]->output();
    EXPECT_NE(read_file(dir.file("times.csv")).find("shm+zmq," + std::to_string(2 * per_host) + ",4096,"),
              std::string::npos)
        << read_file(dir.file("times.csv"));
  }
}

// A rank on host B killed between hierarchical all_reduces (rank 3: not a leader), the ranks
// started one by one (no launcher stops the others): nothing hangs. Rank 2, B's leader, sees its
// member gone in shared memory and aborts the leaders' group; rank 0 learns it there and aborts
// its host's group, where rank 1 waits -- each fails on its own, naming the all_reduce it was in
// and the rank that is gone, well within the group's timeout (120 s).
TEST_F(TwoHostsTest, ARankKilledOnOneHostFailsEveryRankOfBothHosts) {
  TempDir dir;
  auto ps = hierarchical_all_reduces(dir, 29535, "bench.allreduce.crash@20#3");
  expect_exits_within_30s(ps, {1, 1, 1, 128 + SIGKILL}, "a rank killed");
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_TRUE(std::regex_search(ps[rank]->output(), std::regex("all_reduce #[0-9]+ on rank " + std::to_string(rank) +
                                                                 " \\(hierarchical\\) failed: .*rank [0-9]+ is gone")))
        << "rank " << rank << " did not say what it lost:\n"
        << ps[rank]->output();
}

// A rank on host A (rank 1, not a leader) calls broadcast where every other rank calls the
// hierarchical all_reduce. Its broadcast's first message reaches rank 2 on host B, which the
// all_reduce's steps never read: rank 2 fails them as a mismatch at once, and its aborts reach
// every rank (before, each waited out the group's timeout, 120 s here, and failed as a timeout).
TEST_F(TwoHostsTest, ACollectiveOtherThanTheHierarchicalAllReduceFailsEveryRankAsAMismatch) {
  TempDir dir;
  auto ps = hierarchical_all_reduces(dir, 29537, "bench.allreduce.mismatch@20#1");
  expect_exits_within_30s(ps, {1, 1, 1, 1}, "a mismatched collective");
  for (int rank = 0; rank < 4; ++rank) {
    const std::string out = ps[rank]->output();
    EXPECT_NE(out.find("rank 1 runs broadcast #"), std::string::npos) << "rank " << rank << ":\n" << out;
    EXPECT_NE(out.find("runs all_reduce (hierarchical): every rank must call the same collectives"), std::string::npos)
        << "rank " << rank << ":\n"
        << out;
    EXPECT_EQ(out.find("timed out"), std::string::npos) << "rank " << rank << ":\n" << out;
  }
}

// One distrl-launch per host with the same config, as a user starts a run on two machines: the
// config's 4 ranks split in blocks (A: the agent and observer 1, B: observers 2 and 3), the store
// on A's launcher; the run finishes on both. The link is chosen per pair of peers (transport
// auto): ranks that share a host reach each other over shared memory, the others over ZeroMQ
// (tcp), in one world -- the agent serves observer 1's requests from its rings and the others'
// from its sockets, in the same batches.
TEST_F(TwoHostsTest, OneLaunchPerHostRunsAConfigAcrossBothWithSharedMemoryInsideEach) {
  TempDir dir;
  const std::string args = "--nnodes 2 --master-addr " + std::string(kAddrA) + " --master-port 29520 --config " +
                           kSource + "/configs/cartpole.yaml observers=3 learner.rounds=8 run.out_dir=" + dir.path();
  std::vector<std::unique_ptr<Process>> ps = launch_on_both(args, dir);
  std::vector<int> codes;
  wait_all(ps, 120s, &codes);
  ASSERT_EQ(codes, (std::vector<int>{0, 0})) << all_output(ps);
  const std::string a = ps[0]->output(), b = ps[1]->output();
  EXPECT_NE(a.find("3 observer(s) joined"), std::string::npos) << a;
  EXPECT_NE(a.find("[1] "), std::string::npos) << a;
  EXPECT_EQ(a.find("[2] "), std::string::npos) << a;
  for (const char* rank : {"[2] ", "[3] "}) EXPECT_NE(b.find(rank), std::string::npos) << b;
  for (const char* line : {"rpc: agent (rank 0) reaches ranks 0-1 over shared memory, ranks 2-3 over ZeroMQ",
                           "rpc: observer1 (rank 1) reaches ranks 0-1 over shared memory, ranks 2-3 over ZeroMQ"})
    EXPECT_NE(a.find(line), std::string::npos) << "host A's output lacks '" << line << "':\n" << a;
  for (const char* line : {"rpc: observer2 (rank 2) reaches ranks 2-3 over shared memory, ranks 0-1 over ZeroMQ",
                           "rpc: observer3 (rank 3) reaches ranks 2-3 over shared memory, ranks 0-1 over ZeroMQ"})
    EXPECT_NE(b.find(line), std::string::npos) << "host B's output lacks '" << line << "':\n" << b;
  EXPECT_TRUE(std::filesystem::exists(dir.file("policy.pt"))) << a;
}

// APPO across hosts (issue 44): the agent with its learner and observer 1 on A, observer 2 on B,
// tcp between them; the observers' own loops stream their steps to the agent over the link and
// the run solves CartPole.
TEST_F(TwoHostsTest, AppoLearnsCartPoleWithObserversOnBothHosts) {
  TempDir dir;
  const std::string args = "--nnodes 2 --master-addr " + std::string(kAddrA) + " --master-port 29521 --config " +
                           kSource +
                           "/configs/cartpole_appo.yaml observers=2 rpc.transport=tcp run.out_dir=" + dir.path();
  std::vector<std::unique_ptr<Process>> ps = launch_on_both(args, dir);
  std::vector<int> codes;
  wait_all(ps, 120s, &codes);
  ASSERT_EQ(codes, (std::vector<int>{0, 0})) << all_output(ps);
  const std::string a = ps[0]->output(), b = ps[1]->output();
  EXPECT_NE(a.find("appo (asynchronous actor-critic, V-trace)"), std::string::npos) << a;
  EXPECT_NE(a.find("Solved after"), std::string::npos) << a;
  EXPECT_NE(b.find("[2] "), std::string::npos) << b;
}

// The learner in its own process on the other host (roles.learners 1: the world's last rank,
// rank 3 on B): the agent and observer 1 on A send it their trajectories over tcp, it sends
// the weights back, and the run solves CartPole.
TEST_F(TwoHostsTest, AppoLearnsCartPoleWithTheLearnerProcessOnTheOtherHost) {
  TempDir dir;
  const std::string args = "--nnodes 2 --master-addr " + std::string(kAddrA) + " --master-port 29522 --config " +
                           kSource +
                           "/configs/cartpole_appo.yaml observers=2 roles.learners=1 rpc.transport=tcp "
                           "run.out_dir=" +
                           dir.path();
  std::vector<std::unique_ptr<Process>> ps = launch_on_both(args, dir);
  std::vector<int> codes;
  wait_all(ps, 120s, &codes);
  ASSERT_EQ(codes, (std::vector<int>{0, 0})) << all_output(ps);
  const std::string a = ps[0]->output(), b = ps[1]->output();
  EXPECT_NE(a.find("2 observer(s) and 1 learner process joined"), std::string::npos) << a;
  EXPECT_NE(a.find("Solved after"), std::string::npos) << a;
  EXPECT_NE(b.find("[3] learner: serving appo"), std::string::npos) << b;
  EXPECT_NE(b.find(" updates, policy version "), std::string::npos) << b;
}

}  // namespace
