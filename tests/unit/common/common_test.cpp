#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

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
