// RunLoop's duties on one process: the lead's outputs (config.yaml, the CSV's header once, a
// resume appending), rows and progress on the lead only, the local stop rule and its line, and
// a failed write as an OutputError naming the file.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>

#include "common/error.h"
#include "common/stop_signal.h"
#include "tests/support/multiproc.h"
#include "common/run_dir.h"
#include "training/run_loop.h"

namespace distrl::training {
namespace {

using distrl::testing::read_file;
using distrl::testing::TempDir;

RunKeys keys(const std::string& out_dir, int log_interval) {
  RunKeys k;
  k.out_dir = out_dir;
  k.log_interval = log_interval;
  return k;
}

TEST(RunLoopTest, TheLeadWritesConfigAndOneHeaderAndAResumeAppends) {
  TempDir dir;
  const std::string out = dir.file("run");  // not there yet: open() creates it
  {
    RunLoop loop(keys(out, 5), "distrl-test", true);
    loop.open("a: 1\n", "metrics.csv", "step,loss");
    loop.row(1, 0.5);
    loop.row(2, std::string("x"));
  }
  EXPECT_EQ(read_file(out + "/config.yaml"), "a: 1\n");
  EXPECT_EQ(read_file(out + "/metrics.csv"), "step,loss\n1,0.5\n2,x\n");
  distrl::this_run().resume = true;  // as --resume sets it
  RunLoop resumed(keys(out, 5), "distrl-test", true);
  resumed.open("a: 2\n", "metrics.csv", "step,loss", /*resumed_at=*/2);
  resumed.row(3, 0.25);
  distrl::this_run().resume = false;
  EXPECT_EQ(read_file(out + "/metrics.csv"), "step,loss\n1,0.5\n2,x\n3,0.25\n");
  EXPECT_EQ(read_file(out + "/config.yaml"), "a: 2\n");
}

TEST(RunLoopTest, OnlyTheLeadWritesAndPrintsProgress) {
  TempDir dir;
  RunLoop other(keys(dir.path(), 5), "trainer 2", false);
  other.open("a: 1\n", "metrics.csv", "step");
  other.row(1);
  EXPECT_FALSE(std::filesystem::exists(dir.file("metrics.csv")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("config.yaml")));
  EXPECT_FALSE(other.log_due(5));
  RunLoop lead(keys(dir.path(), 5), "trainer 1", true);
  EXPECT_FALSE(lead.log_due(4));
  EXPECT_TRUE(lead.log_due(5));
  EXPECT_TRUE(lead.log_due(10));
}

TEST(RunLoopTest, ALocalStopIsSeenAtTheNextStepAndSaidByName) {
  TempDir dir;
  RunLoop loop(keys(dir.path(), 5), "distrl-test", true);
  EXPECT_FALSE(loop.stop_requested(1));
  set_stop_signal_for_test(SIGTERM);
  EXPECT_TRUE(loop.stop_requested(2));
  EXPECT_TRUE(loop.stopped());
  ::testing::internal::CaptureStdout();
  loop.report_stop("step", 2, 10);
  loop.report_stop("in epoch 1", "");
  loop.report_stop("", "sweep.csv holds the settings measured so far");
  const std::string said = ::testing::internal::GetCapturedStdout();
  set_stop_signal_for_test(0);
  EXPECT_EQ(said,
            "distrl-test: stopped by SIGTERM after step 2 of 10; the outputs hold the run so far\n"
            "distrl-test: stopped by SIGTERM in epoch 1\n"
            "distrl-test: stopped by SIGTERM; sweep.csv holds the settings measured so far\n");
}

TEST(RunLoopTest, AFailedWriteIsAnOutputErrorNamingTheFile) {
  try {
    CsvFile full("/dev/full", "step,loss");
    FAIL() << "a full disk was not noticed";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("'/dev/full'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace distrl::training
