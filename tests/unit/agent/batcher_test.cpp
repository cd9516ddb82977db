// The batcher with fake requesters: one forward per closed batch, answers routed to their
// own rows, bounded waits for silent observers, inactive observers never waited for.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "agent/batcher.h"
#include "common/error.h"

namespace distrl::agent {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Answers each row with action = its first feature, log-prob = -its second; counts forwards.
struct FakeForward {
  std::atomic<int> calls{0};
  std::atomic<int> rows{0};
  Batcher::Forward fn() {
    return [this](const float* obs, int n) {
      ++calls;
      rows += n;
      rl::ActReply r;
      for (int i = 0; i < n; ++i) {
        r.actions.push_back(static_cast<int>(obs[2 * i]));
        r.log_probs.push_back(-obs[2 * i + 1]);
      }
      return r;
    };
  }
};

TEST(BatcherTest, LockStepObserversGetOneForwardPerRoundAndTheirOwnRows) {
  FakeForward fwd;
  const int n = 4, rounds = 50;
  Batcher b(2, n, BatchOptions{256, 10s}, fwd.fn());
  for (int i = 0; i < n; ++i) b.set_active(i, true);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < rounds; ++r) {
        // Observer i sends i+1 rows tagged with (its id, the round).
        std::vector<float> obs;
        for (int k = 0; k <= i; ++k) {
          obs.push_back(static_cast<float>(100 * i + k));
          obs.push_back(static_cast<float>(r));
        }
        rl::ActReply a = b.submit(i, obs).value();
        if (a.actions.size() != static_cast<std::size_t>(i + 1)) ++wrong;
        for (int k = 0; k <= i && k < static_cast<int>(a.actions.size()); ++k)
          if (a.actions[k] != 100 * i + k || a.log_probs[k] != -static_cast<float>(r)) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fwd.calls.load(), rounds);
  EXPECT_EQ(fwd.rows.load(), rounds * (1 + 2 + 3 + 4));
  BatchStats s = b.stats();
  EXPECT_EQ(s.batches, static_cast<std::uint64_t>(rounds));
  EXPECT_EQ(s.closed_all_asked, static_cast<std::uint64_t>(rounds));
  EXPECT_DOUBLE_EQ(s.mean_rows(), 10.0);
}

TEST(BatcherTest, SilentObserverDelaysTheBatchByAtMostMaxWait) {
  FakeForward fwd;
  Batcher b(2, 3, BatchOptions{256, 50ms}, fwd.fn());
  for (int i = 0; i < 3; ++i) b.set_active(i, true);
  const auto t0 = Clock::now();
  auto f0 = b.submit(0, {1, 0});
  auto f1 = b.submit(1, {2, 0});  // observer 2 never asks
  ASSERT_TRUE(f0.wait_for(5s));   // a batcher that waits for the silent observer fails here
  ASSERT_TRUE(f1.wait_for(5s));
  EXPECT_GE(Clock::now() - t0, 50ms);  // not before max_wait; what closed it is in the stats below
  EXPECT_EQ(f0.value().actions[0], 1);
  EXPECT_EQ(f1.value().actions[0], 2);
  EXPECT_EQ(fwd.calls.load(), 1);
  EXPECT_EQ(b.stats().closed_timeout, 1u);
}

TEST(BatcherTest, DeadObserverIsDroppedAndNoLongerWaitedFor) {
  FakeForward fwd;
  Batcher b(2, 3, BatchOptions{256, 60s}, fwd.fn());
  for (int i = 0; i < 3; ++i) b.set_active(i, true);
  auto f0 = b.submit(0, {1, 0});
  auto f1 = b.submit(1, {2, 0});
  EXPECT_FALSE(f0.wait_for(20ms));
  b.set_active(2, false);  // the agent saw observer 2 die
  ASSERT_TRUE(f0.wait_for(5s));
  ASSERT_TRUE(f1.wait_for(5s));
  EXPECT_EQ(b.stats().closed_inactive, 1u);
  EXPECT_EQ(b.active_count(), 2);
  // The next round closes as soon as the two live observers asked.
  auto g0 = b.submit(0, {3, 0});
  auto g1 = b.submit(1, {4, 0});
  ASSERT_TRUE(g0.wait_for(5s));
  EXPECT_EQ(g1.value().actions[0], 4);
  EXPECT_EQ(b.stats().closed_all_asked, 1u);
}

// A waiting step (held at a synchronous round's end, or parked) takes its observer out of the
// batch's waits, and its end puts it back; but the end of a wait never brings back an observer
// the pool dropped meanwhile (the review's case: a held observer killed, its step released).
TEST(BatcherTest, AWaitingStepAndADroppedObserverAreSeparateSays) {
  FakeForward fwd;
  Batcher b(2, 2, BatchOptions{256, 60s}, fwd.fn());
  b.set_active(0, true);
  b.set_active(1, true);
  b.set_waiting(1, true);
  EXPECT_EQ(b.active_count(), 1);
  ASSERT_TRUE(b.submit(0, {1, 0}).wait_for(5s));  // observer 1 is not waited for
  b.set_active(1, false);                         // dropped while its step waited
  b.set_waiting(1, false);                        // the step's wait ends
  EXPECT_EQ(b.active_count(), 1) << "a dropped observer came back";
  b.set_active(1, true);  // taken back
  EXPECT_EQ(b.active_count(), 2);
  auto f0 = b.submit(0, {2, 0});
  EXPECT_FALSE(f0.wait_for(20ms));  // waits for observer 1 again
  auto f1 = b.submit(1, {3, 0});
  ASSERT_TRUE(f0.wait_for(5s));
  EXPECT_EQ(f1.value().actions[0], 3);
}

TEST(BatcherTest, FullBatchClosesAtMaxRows) {
  FakeForward fwd;
  Batcher b(2, 8, BatchOptions{4, 60s}, fwd.fn());
  for (int i = 0; i < 8; ++i) b.set_active(i, true);
  auto f0 = b.submit(0, {1, 0, 1, 0});
  auto f1 = b.submit(1, {2, 0, 2, 0});  // 4 rows: full
  ASSERT_TRUE(f1.wait_for(5s));
  EXPECT_EQ(f0.value().actions, (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(b.stats().closed_full, 1u);
}

TEST(BatcherTest, WhenReadAFlushAnswersWhatArrivedTogetherWithoutWaitingForTheOthers) {
  FakeForward fwd;
  Batcher b(2, 8, BatchOptions{256, 60s, BatchOptions::Close::WhenRead}, fwd.fn());
  for (int i = 0; i < 8; ++i) b.set_active(i, true);
  b.flush();  // nothing open: no forward
  EXPECT_EQ(fwd.calls.load(), 0);
  for (int round = 0; round < 3; ++round) {  // buffers of a finished batch serve the next one
    auto f0 = b.submit(0, {1, 0, 2, 0});
    auto f3 = b.submit(3, {7, 5});
    EXPECT_FALSE(f0.done());
    b.flush();  // 2 of 8 observers asked: answered now, in one forward
    ASSERT_TRUE(f0.done());
    ASSERT_TRUE(f3.done());
    EXPECT_EQ(f0.value().actions, (std::vector<std::int32_t>{1, 2}));
    EXPECT_EQ(f3.value().actions, (std::vector<std::int32_t>{7}));
    EXPECT_EQ(f3.value().log_probs, (std::vector<float>{-5}));
  }
  EXPECT_EQ(fwd.calls.load(), 3);
  EXPECT_EQ(b.stats().closed_read, 3u);
  EXPECT_EQ(b.stats().rows, 9u);
}

TEST(BatcherTest, FlushIsANoOpInLockStep) {
  FakeForward fwd;
  Batcher b(2, 2, BatchOptions{256, 60s}, fwd.fn());
  b.set_active(0, true);
  b.set_active(1, true);
  auto f0 = b.submit(0, {1, 0});
  b.flush();
  EXPECT_FALSE(f0.done());
  auto f1 = b.submit(1, {2, 0});
  ASSERT_TRUE(f0.wait_for(5s));
  EXPECT_EQ(fwd.calls.load(), 1);
}

TEST(BatcherTest, ForwardErrorsReachEveryRequester) {
  Batcher b(2, 2, BatchOptions{256, 60s}, [](const float*, int) -> rl::ActReply { throw ModelError("boom"); });
  b.set_active(0, true);
  b.set_active(1, true);
  auto f0 = b.submit(0, {1, 0});
  auto f1 = b.submit(1, {1, 0});
  EXPECT_THROW(f0.value(), ModelError);
  EXPECT_THROW(f1.value(), ModelError);
}

TEST(BatcherTest, BadRequestsAndStopAreErrors) {
  FakeForward fwd;
  Batcher b(2, 2, BatchOptions{256, 60s}, fwd.fn());
  b.set_active(0, true);
  b.set_active(1, true);
  EXPECT_THROW(b.submit(5, {1, 0}), Error);
  EXPECT_THROW(b.submit(0, {1, 0, 3}), Error);
  auto pending = b.submit(0, {1, 0});
  b.stop();
  EXPECT_THROW(pending.value(), TransportError);
  EXPECT_THROW(b.submit(1, {1, 0}), TransportError);
}

}  // namespace
}  // namespace distrl::agent
