#include "transport/bootstrap/store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "transport/bootstrap/rendezvous.h"

using namespace distrl::transport;
using namespace std::chrono_literals;

TEST(StoreTest, SetGetAddCheck) {
  StoreServer server("tcp://127.0.0.1:*");
  Store store(server.endpoint(), 5s);
  store.set("k", std::string("v\0w", 3));
  EXPECT_EQ(store.get("k"), std::string("v\0w", 3));
  EXPECT_EQ(store.add("n", 2), 2);
  EXPECT_EQ(store.add("n", -5), -3);
  EXPECT_TRUE(store.check({"k", "n"}));
  EXPECT_FALSE(store.check({"k", "missing"}));
  EXPECT_TRUE(store.ping(1s));
}

// Hostile-peer case 2: add() on a key holding text used to kill the server thread (stoll);
// now the caller gets an error naming the key and the server keeps serving everyone.
TEST(StoreTest, AddOnTextIsRefusedAndTheServerKeepsServing) {
  StoreServer server("tcp://127.0.0.1:*");
  Store store(server.endpoint(), 5s);
  store.set("k", "abc");
  try {
    store.add("k", 1);
    FAIL() << "add on text was accepted";
  } catch (const distrl::TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("add(k): the key holds 'abc', not a counter"), std::string::npos) << e.what();
  }
  store.set("m", "12x");
  EXPECT_THROW(store.add("m", 1), distrl::TransportError);
  store.set("big", "9223372036854775807");
  EXPECT_THROW(store.add("big", 1), distrl::TransportError);  // overflow
  EXPECT_EQ(store.add("n", 3), 3);
  EXPECT_EQ(store.get("k"), "abc");
  EXPECT_TRUE(store.ping(1s));
}

// The limits come from "keys=N,mb=N,value_mb=N,waiters=N" (distrl-launch --store-limits, or
// DISTRL_STORE_LIMITS); what is not given keeps its default, anything odd is a ConfigError
// naming it.
TEST(StoreTest, LimitsAreReadFromTextAndTheEnvironment) {
  const StoreLimits defaults;
  StoreLimits l = StoreLimits::parse("mb=256,value_mb=0.5,keys=10");
  EXPECT_EQ(l.max_bytes, std::size_t{256} << 20);
  EXPECT_EQ(l.max_value_bytes, std::size_t{512} << 10);
  EXPECT_EQ(l.max_keys, 10u);
  EXPECT_EQ(l.max_waiters, defaults.max_waiters);
  for (const std::string bad : {"mb", "mb=", "mb=x", "mb=0", "mb=1e10", "keys=5x", "gb=1"}) {
    try {
      StoreLimits::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const distrl::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("store limits"), std::string::npos) << e.what();
    }
  }
  ::setenv("DISTRL_STORE_LIMITS", "waiters=3", 1);
  EXPECT_EQ(StoreLimits::from_env().max_waiters, 3u);
  ::setenv("DISTRL_STORE_LIMITS", "waiters=-1", 1);
  EXPECT_THROW(StoreLimits::from_env(), distrl::ConfigError);
  ::unsetenv("DISTRL_STORE_LIMITS");
  EXPECT_EQ(StoreLimits::from_env().max_bytes, defaults.max_bytes);
}

// Values, keys and parked waits are bounded: past a bound the request is refused by name and
// the store stays usable (what is already there is kept).
TEST(StoreTest, EveryBoundIsATypedErrorNotGrowth) {
  StoreLimits limits;
  limits.max_keys = 4;
  limits.max_bytes = 3000;
  limits.max_value_bytes = 1000;
  limits.max_waiters = 2;
  StoreServer server("tcp://127.0.0.1:*", limits);
  Store store(server.endpoint(), 5s);
  auto refused = [&](auto call, const std::string& why) {
    try {
      call();
      ADD_FAILURE() << "accepted past " << why;
    } catch (const distrl::TransportError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused([&] { store.set("v", std::string(1001, 'x')); }, "max_value_bytes (1000)");
  store.set("a", std::string(1000, 'a'));
  store.set("b", std::string(1000, 'b'));
  refused([&] { store.set("c", std::string(1000, 'c')); }, "max_bytes (3000)");
  store.set("a", "small");  // replacing frees its bytes
  store.set("c", std::string(1000, 'c'));
  store.set("d", "1");
  refused([&] { store.set("e", "1"); }, "max_keys (4)");
  refused([&] { store.add("f", 1); }, "max_keys (4)");
  // Two clients park a wait each; a third wait is refused at once, not parked.
  Store w1(server.endpoint(), 5s), w2(server.endpoint(), 5s);
  std::thread t1([&] { EXPECT_THROW(w1.wait({"never"}, 1500ms), distrl::TimeoutError); });
  std::thread t2([&] { EXPECT_THROW(w2.wait({"never"}, 1500ms), distrl::TimeoutError); });
  std::this_thread::sleep_for(300ms);
  refused([&] { store.wait({"never"}, 1000ms); }, "max_waiters (2)");
  t1.join();
  t2.join();
  EXPECT_EQ(store.get("a"), "small");
  EXPECT_EQ(store.get("d"), "1");
}

TEST(StoreTest, GetWaitsForTheKey) {
  StoreServer server("tcp://127.0.0.1:*");
  Store a(server.endpoint(), 5s), b(server.endpoint(), 5s);
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    b.set("late", "here");
  });
  EXPECT_EQ(a.get("late"), "here");
  a.wait({"late"});
  setter.join();
}

TEST(StoreTest, WaitTimesOutWithTheKeyNamed) {
  StoreServer server("tcp://127.0.0.1:*");
  Store store(server.endpoint(), 5s);
  try {
    store.wait({"never"}, 100ms);
    FAIL();
  } catch (const distrl::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  store.set("after", "1");  // the client still works after a timeout
  EXPECT_EQ(store.get("after"), "1");
}

TEST(StoreTest, NoServerMeansTimeoutNotHang) {
  Store store("tcp://127.0.0.1:1", 200ms);
  EXPECT_FALSE(store.ping(100ms));
  EXPECT_THROW(store.set("k", "v"), distrl::TimeoutError);
}

TEST(StoreTest, ConcurrentCountersAreAtomic) {
  StoreServer server("tcp://127.0.0.1:*");
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      Store s(server.endpoint(), 5s);
      for (int j = 0; j < 50; ++j) s.add("c", 1);
    });
  for (auto& t : ts) t.join();
  Store s(server.endpoint(), 5s);
  EXPECT_EQ(s.add("c", 0), 200);
}

// Clears the launcher variables, sets vars, and puts everything back when done.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::pair<std::string, std::string>> vars) {
    for (const char* k :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
          "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"}) {
      if (const char* old = std::getenv(k)) saved_.emplace_back(k, old);
      else unset_.push_back(k);
      ::unsetenv(k);
    }
    for (auto& [k, v] : vars) {
      ::setenv(k.c_str(), v.c_str(), 1);
      unset_.push_back(k);
    }
  }
  ~EnvGuard() {
    for (const auto& k : unset_) ::unsetenv(k.c_str());
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
  std::vector<std::string> unset_;
};

TEST(RendezvousTest, EnvMethodReadsTorchVariables) {
  EnvGuard env(
      {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  auto w = resolve_world("env://", -1, -1);
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.master_addr, "10.0.0.1");
  EXPECT_EQ(w.master_port, 29500);
}

TEST(RendezvousTest, EnvMethodReadsSlurmAndOpenMpiVariables) {
  {
    EnvGuard env({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"MASTER_PORT", "1234"}});
    auto w = resolve_world("env://", -1, -1);
    EXPECT_EQ(w.rank, 5);
    EXPECT_EQ(w.world_size, 8);
    EXPECT_EQ(w.local_rank, 1);
  }
  {
    EnvGuard env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"MASTER_PORT", "1234"}});
    auto w = resolve_world("env://", -1, -1);
    EXPECT_EQ(w.rank, 1);
    EXPECT_EQ(w.world_size, 3);
  }
}

TEST(RendezvousTest, TcpAndFileMethods) {
  EnvGuard env({});
  auto t = resolve_world("tcp://node7:4000", 1, 2);
  EXPECT_EQ(t.master_addr, "node7");
  EXPECT_EQ(t.master_port, 4000);
  auto f = resolve_world("file:///tmp/x", 0, 1);
  EXPECT_EQ(f.file_path, "/tmp/x");
}

TEST(RendezvousTest, BadInputNamesTheProblem) {
  EnvGuard env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const distrl::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { resolve_world("env://", -1, -1); }).find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(message([] { resolve_world("tcp://host", -1, -1); }).find("tcp://host:port"), std::string::npos);
  EXPECT_NE(message([] { resolve_world("tcp://host:99999", -1, -1); }).find("expected an integer in [1, 65535]"),
            std::string::npos);
  EXPECT_NE(message([] { resolve_world("file://relative", -1, -1); }).find("absolute"), std::string::npos);
  EXPECT_NE(message([] { resolve_world("udp://x:1", -1, -1); }).find("unknown init method"), std::string::npos);
  EXPECT_NE(message([] { resolve_world("tcp://h:1", 3, 2); }).find("not below world size"), std::string::npos);
  ::setenv("RANK", "abc", 1);
  EXPECT_NE(message([] { resolve_world("tcp://h:1", -1, -1); }).find("RANK is 'abc'"), std::string::npos);
}
