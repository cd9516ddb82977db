// TensorBoard event files read back by TensorBoard's own reader (tests/support/read_tfevents.py,
// run with the Python that has the `tensorboard` package: DISTRL_REFERENCE_PYTHON, which
// `make test` points at its reference venv; skipped, saying so, when there is none).
#include "common/event_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
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
    distrl::CsvEvents csv(dir.path(), "epoch,train_loss,test_accuracy,seconds,note");
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
            "seconds_per_epoch 2 1.5\n"
            "test_accuracy 1 0.8125\ntest_accuracy 2 0.875\n"
            "train_loss 1 0.5\ntrain_loss 2 0.25\n");
}
