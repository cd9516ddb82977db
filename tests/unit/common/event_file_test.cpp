// TensorBoard event files read back by TensorBoard's own reader (tests/support/read_tfevents.py,
// run with the Python that has the `tensorboard` package: DISTRL_REFERENCE_PYTHON, which
// `make test` points at its reference venv; skipped, saying so, when there is none).
#include "common/event_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "tests/support/multiproc.h"
#include "tests/support/tfevents.h"

using distrl::testing::TempDir;

TEST(EventFileTest, Crc32cIsCastagnoli) {
  EXPECT_EQ(distrl::crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(distrl::crc32c("", 0), 0u);
}

TEST(EventFileTest, TensorBoardReadsTheScalarsBack) {
  TempDir dir;
  {
    distrl::EventFile f(dir.path());
    EXPECT_NE(f.path().find("events.out.tfevents."), std::string::npos);
    for (int step = 1; step <= 3; ++step) f.scalar("loss", step, 1.0 / step);
    f.scalar("reward/mean", 5, 195.5);
    f.scalar("reward/mean", 6, std::nan(""));  // skipped
    f.scalar("big_step", 1LL << 40, -2.25);
    f.flush();
  }
  {
    distrl::CsvEvents csv(dir.path(), "epoch,train_loss,test_accuracy,seconds,note", -1,
                          distrl::CsvScalars::with_clock("seconds"));
    csv.row({"1", "0.5", "0.8125", "2.5", "warmup"});
    csv.row({"2", "0.25", "0.875", "4", "x"});
    csv.row({"not-a-step", "9"});  // skipped whole
  }
  const auto r = distrl::testing::read_tfevents(dir.path());
  if (!r.ran) GTEST_SKIP() << r.why;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "big_step 1099511627776 -2.25\n"
            "loss 1 1\nloss 2 0.5\nloss 3 0.333333\n"
            "reward/mean 5 195.5\n"
            "seconds 1 2.5\nseconds 2 4\n"
            "seconds_per_epoch 1 2.5\nseconds_per_epoch 2 1.5\n"
            "test_accuracy 1 0.8125\ntest_accuracy 2 0.875\n"
            "train_loss 1 0.5\ntrain_loss 2 0.25\n");
}

// A resumed run's event file starts with a SessionLog START at the first step run again:
// TensorBoard's reader drops the earlier file's points from there on (steps 4 and 5 were written
// after the checkpoint at 3 and run again), so a curve never shows a step twice.
TEST(EventFileTest, AResumedRunsFileMakesTensorBoardForgetTheStepsItRunsAgain) {
  TempDir dir;
  {
    distrl::CsvEvents first(dir.path(), "round,loss");
    for (int step = 1; step <= 5; ++step) first.row({std::to_string(step), std::to_string(10 * step)});
  }
  {
    distrl::CsvEvents resumed(dir.path(), "round,loss", /*resumed_at=*/3);
    for (int step = 4; step <= 6; ++step) resumed.row({std::to_string(step), std::to_string(100 * step)});
  }
  const auto r = distrl::testing::read_tfevents(dir.path());
  if (!r.ran) GTEST_SKIP() << r.why;
  EXPECT_EQ(r.code, 0) << r.out;
  std::string points;  // the reader's lines, without the log line it prints when it purges
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("loss ", 0) == 0) points += line + "\n";
  EXPECT_EQ(points, "loss 1 10\nloss 2 20\nloss 3 30\nloss 4 400\nloss 5 500\nloss 6 600\n") << r.out;
}

// The agent's way of showing its CSV: columns under tags of their own, a clock, and a running
// total's rate. A resumed run's first rates come from the row before it (the CSV's last kept
// row); a column that holds each row's own duration (no clock named) derives nothing.
TEST(EventFileTest, CsvColumnsTakeTheirTagsAndRunningTotalsTheirRates) {
  TempDir dir, resumed_dir, durations, restarted;
  distrl::CsvScalars scalars = distrl::CsvScalars::with_clock("seconds");
  scalars.tags = {{"mean_reward", "reward/mean"}};
  scalars.rates = {"env_steps"};
  scalars.carries_over = true;
  {
    distrl::CsvEvents csv(dir.path(), "round,env_steps,seconds,mean_reward", -1, scalars);
    csv.row({"1", "100", "2", "nan"});  // no episode ended: no reward/mean point
    csv.row({"2", "400", "4", "21.5"});
  }
  auto r = distrl::testing::read_tfevents(dir.path());
  if (!r.ran) GTEST_SKIP() << r.why;
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out,
            "env_steps 1 100\nenv_steps 2 400\n"
            "env_steps_per_s 1 50\nenv_steps_per_s 2 150\n"
            "reward/mean 2 21.5\n"
            "seconds 1 2\nseconds 2 4\n"
            "seconds_per_round 1 2\nseconds_per_round 2 2\n");

  {  // resumed after round 2 (its row is the one before), and a clock that started again
    distrl::CsvEvents csv(resumed_dir.path(), "round,env_steps,seconds,mean_reward", 2, scalars, "2,400,4,21.5");
    csv.row({"3", "1000", "7", "30"});
    csv.row({"4", "1100", "1", "31"});  // earlier than the row before: no rate
  }
  r = distrl::testing::read_tfevents(resumed_dir.path());
  EXPECT_EQ(r.points("env_steps_per_s"), 1) << r.out;
  EXPECT_NE(r.out.find("env_steps_per_s 3 200\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.points("seconds_per_round"), 1) << r.out;

  {
    distrl::CsvEvents csv(durations.path(), "epoch,loss,seconds");  // each epoch's own seconds
    csv.row({"1", "0.5", "3"});
    csv.row({"2", "0.25", "3.5"});
  }
  r = distrl::testing::read_tfevents(durations.path());
  EXPECT_EQ(r.points("seconds"), 2) << r.out;
  EXPECT_EQ(r.points("seconds_per_epoch"), 0) << r.out;

  {  // resumed, its clock started again (as a trainer's): the row before is no baseline
    distrl::CsvEvents csv(restarted.path(), "step,loss,seconds", 2, distrl::CsvScalars::with_clock("seconds"),
                          "2,0.5,40");
    csv.row({"3", "0.4", "45"});
    csv.row({"4", "0.3", "50"});
  }
  r = distrl::testing::read_tfevents(restarted.path());
  EXPECT_EQ(r.out.find("seconds_per_step 3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seconds_per_step 4 5\n"), std::string::npos) << r.out;
}
