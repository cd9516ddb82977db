#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/output_file.h"
#include "common/quantiles.h"
#include "common/stop_signal.h"

TEST(ErrorTest, HierarchyLetsCallersCatchBroadly) {
  EXPECT_THROW(throw distrl::TimeoutError("t"), distrl::TransportError);
  EXPECT_THROW(throw distrl::ConfigError("c"), distrl::Error);
  distrl::RemoteError e("worker1", "std::invalid_argument", "bad x");
  EXPECT_EQ(e.worker(), "worker1");
  EXPECT_EQ(e.type(), "std::invalid_argument");
  EXPECT_EQ(e.message(), "bad x");
  EXPECT_STREQ(e.what(), "remote error on worker1: std::invalid_argument: bad x");
}

TEST(ErrorTest, CheckThrowsWithLocation) {
  try {
    DISTRL_CHECK(1 + 1 == 3, "arithmetic");
    FAIL();
  } catch (const distrl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 + 1 == 3"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("arithmetic"), std::string::npos);
  }
}

TEST(LogTest, RateLimiterLetsOneLinePerInterval) {
  distrl::RateLimiter limiter(std::chrono::milliseconds(10000));
  long held = -1;
  EXPECT_TRUE(limiter.allow(&held));
  EXPECT_EQ(held, 0);
  EXPECT_FALSE(limiter.allow(&held));
  EXPECT_FALSE(limiter.allow(&held));
  EXPECT_FALSE(limiter.allow(&held));
}

TEST(LogTest, RateLimiterReportsHowManyItHeldBack) {
  distrl::RateLimiter limiter(std::chrono::milliseconds(100));
  long held = -1;
  EXPECT_TRUE(limiter.allow(&held));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(limiter.allow(&held));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // past the interval
  EXPECT_TRUE(limiter.allow(&held));
  EXPECT_EQ(held, 3);
}

// tests/CMakeLists.txt gives every test DISTRL_LOG_LEVEL=warn; a list-valued ENVIRONMENT
// once lost it without a word.
TEST(TestEnvironmentTest, CTestSetsTheLogLevelToWarn) {
  const char* level = std::getenv("DISTRL_LOG_LEVEL");
  ASSERT_NE(level, nullptr);
  EXPECT_STREQ(level, "warn");
  EXPECT_FALSE(distrl::log_enabled(distrl::LogLevel::Info));
  EXPECT_TRUE(distrl::log_enabled(distrl::LogLevel::Warn));
}

TEST(ConfigHeaderTest, BuildSwitchesAreDefined) {
  EXPECT_TRUE(DISTRL_WITH_CUDA == 0 || DISTRL_WITH_CUDA == 1);
  EXPECT_TRUE(DISTRL_WITH_NCCL == 0 || DISTRL_WITH_NCCL == 1);
  EXPECT_STRNE(DISTRL_VERSION, "");
}

// A full disk is a named error and never a torn file (issue 14, case 5). RLIMIT_FSIZE stands in
// for a full disk (EFBIG, with SIGXFSZ ignored); /dev/full is one (ENOSPC).
TEST(OutputFileTest, AFullDiskIsANamedErrorAndThePreviousFileStays) {
  char tmpl[] = "/tmp/distrl-output-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/sub/checkpoint.pt";
  distrl::write_file_atomically(path, "the good one");  // creates sub/
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 1000;
  ::signal(SIGXFSZ, SIG_IGN);
  ::setrlimit(RLIMIT_FSIZE, &small);
  std::string what;
  try {
    distrl::write_file_atomically(path, std::string(4000, 'x'));
  } catch (const distrl::OutputError& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, SIG_DFL);
  EXPECT_NE(what.find("cannot write '" + path + "': File too large"), std::string::npos) << what;
  EXPECT_NE(what.find("the file there before is unchanged"), std::string::npos) << what;
  std::ifstream in(path);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "the good one");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  std::ofstream full("/dev/full");
  full << "1,2,3.5\n";  // one metrics row, checked as the runs check theirs
  try {
    distrl::check_written(full, "/dev/full");
    ADD_FAILURE() << "a write to /dev/full passed";
  } catch (const distrl::OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(tmpl);
}

// Latency percentiles of a long run in fixed memory (issue 14, case 7): within 1 % of the
// exact nearest-rank quantile on a skewed sample, and the same 11 KiB at any count.
TEST(QuantileSketchTest, WithinOnePercentOfTheExactQuantiles) {
  std::mt19937 rng(7);
  std::lognormal_distribution<double> latency(std::log(80.0), 0.8);  // microseconds, long tail
  std::vector<double> all;
  distrl::QuantileSketch sketch;
  for (int i = 0; i < 200000; ++i) {
    all.push_back(latency(rng));
    sketch.add(all.back());
  }
  std::sort(all.begin(), all.end());
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    const double exact = all[static_cast<std::size_t>(q * (all.size() - 1) + 0.5)];
    EXPECT_NEAR(sketch.quantile(q), exact, 0.01 * exact) << "q " << q;
  }
  EXPECT_EQ(sketch.count(), all.size());
  EXPECT_LE(sizeof(distrl::QuantileSketch), 12u << 10);
  distrl::QuantileSketch empty;
  EXPECT_EQ(empty.quantile(0.5), 0);
  empty.add(std::nan(""));
  EXPECT_EQ(empty.count(), 0u);
}

// A registered socket file that a failed start leaves: the guard removes it; once released,
// its owner does.
TEST(RegisteredPathGuardTest, RemovesAFileUnlessReleased) {
  const std::string dir = std::filesystem::temp_directory_path() / ("distrl-guard-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string a = dir + "/a.ipc", b = dir + "/b.ipc";
  std::ofstream(a) << "x";
  std::ofstream(b) << "x";
  distrl::remove_on_fatal_signal(a.c_str());
  distrl::remove_on_fatal_signal(b.c_str());
  {
    distrl::RegisteredPathGuard failed(a);
    distrl::RegisteredPathGuard started(b);
    started.release();
  }
  EXPECT_FALSE(std::filesystem::exists(a));
  EXPECT_TRUE(std::filesystem::exists(b));
  distrl::forget_on_fatal_signal(b.c_str());
  { distrl::RegisteredPathGuard nothing(""); }
  std::filesystem::remove_all(dir);
}
