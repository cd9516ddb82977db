// A run's outputs as every tool writes them (run/run_outputs.h): the lead claims the directory
// before writing, writes config.yaml, the CSV and its TensorBoard rows, appends on resume (the
// event file's first rates taken from the CSV's last kept row) and draws the learning curve;
// any other rank writes nothing.
#include "run/run_outputs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/error.h"
#include "common/run_dir.h"
#include "tests/support/multiproc.h"
#include "tests/support/tfevents.h"

namespace distrl::run {
namespace {

using distrl::testing::read_file;
using distrl::testing::TempDir;

TEST(RunOutputsTest, TheLeadClaimsTheDirectoryAndWritesEveryOutput) {
  TempDir dir;
  const std::string out = dir.file("run");  // not there yet: the claim makes it
  {
    RunOutputs lead(out, true, true);
    EXPECT_TRUE(std::filesystem::exists(out));
    try {  // a second run into the same directory, while this one lives
      RunOutputs second(out, true, true);
      ADD_FAILURE() << "a second claim on " << out << " was granted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(out), std::string::npos) << e.what();
    }
    lead.write_config("a: 1\n");
    lead.open_csv("metrics.csv", "round,env_steps,seconds,loss", -1, CsvScalars::with_clock("seconds"));
    lead.row(1, 100, 1.5, 0.5);
    lead.row(2, 250, 3.0, 0.25);
    EXPECT_EQ(lead.csv_path(), out + "/metrics.csv");
    ASSERT_FALSE(lead.event_file().empty());
    EXPECT_EQ(lead.tensorboard_line(), "TensorBoard: " + lead.event_file() + " (tensorboard --logdir " + out + ")");
    lead.close();
    EXPECT_TRUE(lead.plot({{"loss", "round", {{"round", "loss", "loss"}}}}));  // gnuplot comes with make deps
  }
  EXPECT_EQ(read_file(out + "/config.yaml"), "a: 1\n");
  EXPECT_EQ(read_file(out + "/metrics.csv"), "round,env_steps,seconds,loss\n1,100,1.5,0.5\n2,250,3,0.25\n");
  EXPECT_TRUE(std::filesystem::exists(out + "/learning_curve.png"));
  const auto events = distrl::testing::read_tfevents(out);
  if (events.ran) {
    EXPECT_EQ(events.code, 0) << events.out;
    EXPECT_EQ(events.points("loss"), 2) << events.out;
    EXPECT_EQ(events.points("seconds_per_round"), 2) << events.out;
  }
}

TEST(RunOutputsTest, AResumedRunAppendsAndTakesItsFirstRatesFromTheRowBefore) {
  TempDir dir;
  CsvScalars scalars = CsvScalars::with_clock("seconds");
  scalars.rates = {"env_steps"};
  scalars.carries_over = true;  // as the agent's
  {
    RunOutputs first(dir.path(), true, true);
    first.open_csv("metrics.csv", "round,env_steps,seconds", -1, scalars);
    for (int r = 1; r <= 3; ++r) first.row(r, 100 * r, 2.0 * r);
  }
  distrl::this_run().resume = true;  // as --resume sets it
  {
    RunOutputs resumed(dir.path(), true, true);
    resumed.open_csv("metrics.csv", "round,env_steps,seconds", /*resumed_at=*/2, scalars);  // round 3 runs again
    resumed.row(3, 500, 6.0);
  }
  distrl::this_run().resume = false;
  EXPECT_EQ(read_file(dir.file("metrics.csv")), "round,env_steps,seconds\n1,100,2\n2,200,4\n3,500,6\n");
  const auto events = distrl::testing::read_tfevents(dir.path());
  if (!events.ran) GTEST_SKIP() << events.why;
  // Round 3 of the second file: (500 - 200) steps in (6 - 4) s, from the kept row of round 2.
  EXPECT_NE(events.out.find("env_steps_per_s 3 150\n"), std::string::npos) << events.out;
}

// The CSV keeps 6 digits; the event file's rates are taken from every digit, so a quarter of a
// second ten thousand seconds into a run is not rounded away.
TEST(RunOutputsTest, RatesUseEveryDigitOfTheClock) {
  TempDir dir;
  CsvScalars scalars = CsvScalars::with_clock("seconds");
  scalars.rates = {"env_steps"};
  {
    RunOutputs out(dir.path(), true, true);
    out.open_csv("metrics.csv", "round,env_steps,seconds", -1, scalars);
    out.row(1, 100, 10000.25);
    out.row(2, 200, 10000.5);
  }
  const auto events = distrl::testing::read_tfevents(dir.path());
  if (!events.ran) GTEST_SKIP() << events.why;
  EXPECT_NE(events.out.find("env_steps_per_s 2 400\n"), std::string::npos) << events.out;  // 100 / 0.25
}

TEST(RunOutputsTest, AnyOtherRankWritesNothing) {
  TempDir dir;
  const std::string out = dir.file("run");
  RunOutputs other(out, false, true);
  other.write_config("a: 1\n");
  other.open_csv("metrics.csv", "round,loss");
  other.row(1, 0.5);
  other.close();
  EXPECT_FALSE(other.plot({{"loss", "round", {{"round", "loss", "loss"}}}}));
  EXPECT_EQ(other.tensorboard_line(), "");
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace distrl::run
