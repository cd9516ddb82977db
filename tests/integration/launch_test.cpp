// distrl-launch as a user runs it: a real binary starting real processes.
#include <gtest/gtest.h>

#include "tests/support/command.h"

namespace {
using distrl::testing::launch;
}  // namespace

TEST(LaunchTest, SetsRankVariablesAndPrefixesOutput) {
  auto r = launch("--nproc 3 -- sh -c 'echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK addr=$MASTER_ADDR; echo second'");
  EXPECT_EQ(r.code, 0) << r.output;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(r.output.find("[" + std::to_string(i) + "] rank=" + std::to_string(i) + " world=3 local=" +
                            std::to_string(i) + " addr=127.0.0.1"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("[" + std::to_string(i) + "] second"), std::string::npos) << r.output;
  }
}

TEST(LaunchTest, MultiNodeRanksAreOffsetByNodeRank) {
  auto r = launch("--nproc 2 --nnodes 3 --node-rank 2 --master-port 29999 -- sh -c 'echo r=$RANK w=$WORLD_SIZE p=$MASTER_PORT'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[4] r=4 w=6 p=29999"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[5] r=5 w=6 p=29999"), std::string::npos) << r.output;
}

TEST(LaunchTest, FirstFailureStopsTheOthersAndIsReturned) {
  auto r = launch("--nproc 3 -- sh -c 'if [ $RANK = 1 ]; then exit 3; fi; sleep 60'");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with code 3; stopping the others"), std::string::npos) << r.output;
}

TEST(LaunchTest, BadUsageIsAConfigError) {
  EXPECT_EQ(launch("--nproc 2").code, 2);
  EXPECT_EQ(launch("--nproc 2 --nnodes 2 -- true").code, 2);  // multi-node needs a fixed port
  auto help = launch("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.output.find("--nproc"), std::string::npos);
  EXPECT_EQ(launch("--nproc 1 -- /nonexistent/program").code, 127);
}
