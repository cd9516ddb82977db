#include "transport/runtime/future.h"

#include <gtest/gtest.h>

#include "transport/runtime/thread_pool.h"

using namespace distrl::transport;
using namespace std::chrono_literals;

TEST(FutureTest, ValueSetFromAnotherThread) {
  Promise<int> p;
  auto f = p.get_future();
  std::thread t([p] {
    std::this_thread::sleep_for(5ms);
    p.set_value(7);
  });
  EXPECT_EQ(f.value(), 7);
  t.join();
}

TEST(FutureTest, ErrorRethrowsTypedException) {
  Promise<int> p;
  p.set_error(std::make_exception_ptr(distrl::TimeoutError("late")));
  EXPECT_THROW(p.get_future().value(), distrl::TimeoutError);
  EXPECT_TRUE(p.get_future().has_error());
}

TEST(FutureTest, FirstSetWins) {
  Promise<int> p;
  EXPECT_TRUE(p.set_value(1));
  EXPECT_FALSE(p.set_value(2));
  EXPECT_FALSE(p.set_error(std::make_exception_ptr(distrl::Error("x"))));
  EXPECT_EQ(p.get_future().value(), 1);
}

TEST(FutureTest, WaitForTimesOut) {
  Promise<int> p;
  EXPECT_FALSE(p.get_future().wait_for(10ms));
  p.set_value(1);
  EXPECT_TRUE(p.get_future().wait_for(0ms));
}

TEST(FutureTest, ThenChainsValuesAndErrors) {
  Promise<int> p;
  auto doubled = p.get_future().then([](const Future<int>& f) { return f.value() * 2; });
  auto text = doubled.then([](const Future<int>& f) { return std::to_string(f.value()); });
  auto failing = p.get_future().then([](const Future<int>&) -> int { throw distrl::ModelError("boom"); });
  p.set_value(21);
  EXPECT_EQ(text.value(), "42");
  EXPECT_THROW(failing.value(), distrl::ModelError);
}

TEST(FutureTest, ThenOnCompletedFutureRunsInline) {
  auto f = Future<int>::ready(3);
  bool ran = false;
  f.then([&](const Future<int>&) { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(FutureTest, VoidFutures) {
  Promise<void> p;
  auto f = p.get_future().then([](const Future<void>& g) {
    g.value();
    return 5;
  });
  p.set_value();
  EXPECT_EQ(f.value(), 5);
}

TEST(FutureTest, BrokenPromiseFailsInsteadOfHanging) {
  Future<int> f;
  {
    Promise<int> p;
    f = p.get_future();
  }
  EXPECT_THROW(f.value(), distrl::Error);
}

TEST(FutureTest, CallbacksRunOnTheCompletersExecutor) {
  ThreadPool pool(1, "test");
  std::thread::id pool_thread;
  pool.post([&] { pool_thread = std::this_thread::get_id(); });
  Promise<int> p;
  Promise<std::thread::id> ran_on;
  p.get_future().then([ran_on](const Future<int>&) { ran_on.set_value(std::this_thread::get_id()); });
  p.set_value(1, &pool);
  EXPECT_EQ(ran_on.get_future().value(), pool_thread);
  EXPECT_NE(pool_thread, std::this_thread::get_id());
}

TEST(FutureTest, InlineContinuationsRunOnTheCompleterAndUserCallbacksBehindThemStillOnItsExecutor) {
  ThreadPool pool(1, "test");
  Promise<std::thread::id> pool_id;
  pool.post([pool_id] { pool_id.set_value(std::this_thread::get_id()); });
  const std::thread::id pool_thread = pool_id.get_future().value();
  Promise<int> p;
  std::thread::id inline_ran_on, inline_ran_on2;
  Promise<std::thread::id> user_ran_on, when_all_user_ran_on;
  // The library's chain: a boxed result, then when_all's counting, all inline.
  auto boxed = p.get_future().then_inline([&](const Future<int>& f) {
    inline_ran_on = std::this_thread::get_id();
    return f.value() * 2;
  });
  auto both = when_all(std::vector<Future<int>>{boxed, Future<int>::ready(5)});
  both.then_inline([&](const Future<std::vector<int>>&) { inline_ran_on2 = std::this_thread::get_id(); });
  // A user's callbacks behind them: on the pool, as behind any RPC result.
  boxed.then([user_ran_on](const Future<int>&) { user_ran_on.set_value(std::this_thread::get_id()); });
  both.then([when_all_user_ran_on](const Future<std::vector<int>>&) {
    when_all_user_ran_on.set_value(std::this_thread::get_id());
  });
  p.set_value(21, &pool);  // completed here, naming the pool (as the I/O thread completes RPC results)
  EXPECT_EQ(inline_ran_on, std::this_thread::get_id());
  EXPECT_EQ(inline_ran_on2, std::this_thread::get_id());
  EXPECT_EQ(boxed.value(), 42);
  EXPECT_EQ(both.value(), (std::vector<int>{42, 5}));
  EXPECT_EQ(user_ran_on.get_future().value(), pool_thread);
  EXPECT_EQ(when_all_user_ran_on.get_future().value(), pool_thread);
  // An error takes the same way.
  Promise<int> q;
  auto failed = q.get_future().then_inline([](const Future<int>& f) { return f.value(); });
  q.set_error(std::make_exception_ptr(distrl::TransportError("gone")), &pool);
  EXPECT_THROW(failed.value(), distrl::TransportError);
}

TEST(FutureTest, WhenAllCollectsInOrder) {
  std::vector<Promise<int>> ps(3);
  std::vector<Future<int>> fs;
  for (auto& p : ps) fs.push_back(p.get_future());
  auto all = when_all(fs);
  ps[2].set_value(3);
  ps[0].set_value(1);
  EXPECT_FALSE(all.done());
  ps[1].set_value(2);
  EXPECT_EQ(all.value(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(when_all(std::vector<Future<int>>{}).value().size(), 0u);
}

TEST(FutureTest, WhenAllFailsWithTheFirstErrorAfterAllComplete) {
  std::vector<Promise<void>> ps(2);
  std::vector<Future<void>> fs{ps[0].get_future(), ps[1].get_future()};
  auto all = when_all(fs);
  ps[1].set_error(std::make_exception_ptr(distrl::TransportError("gone")));
  EXPECT_FALSE(all.done());
  ps[0].set_value();
  EXPECT_THROW(all.value(), distrl::TransportError);
}

TEST(ThreadPoolTest, RunsEveryTaskBeforeStopping) {
  std::atomic<int> n{0};
  {
    ThreadPool pool(2, "test");
    for (int i = 0; i < 1000; ++i) pool.post([&] { n.fetch_add(1); });
  }
  EXPECT_EQ(n.load(), 1000);
}
