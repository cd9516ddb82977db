// The shared-memory collectives of one host, two ranks as two threads of this process (each
// with its own mapping, as two processes would have): results, and the segment as untrusted
// input -- a third party scribbling random bytes over every word while collectives run can make
// them compute garbage or fail, never crash, hang past the deadline or read out of bounds.
#include "transport/collectives/detail/shm_collectives.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <random>
#include <thread>

#include <torch/torch.h>

#include "common/error.h"

using namespace distrl::transport;
using namespace distrl::transport::detail;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct TwoRanks {
  std::unique_ptr<ShmCollectives> r0, r1;
  std::uint64_t seq = 0;
  explicit TwoRanks(const ProcessGroupOptions& o) {
    std::string why;
    r0 = ShmCollectives::host(2, o, &why);
    if (!r0) throw std::runtime_error(why);
    auto joined =
        std::async(std::launch::async, [&] { return ShmCollectives::join(r0->address(), 1, 2, o, Clock::now() + 5s); });
    r0->admit_members(Clock::now() + 5s);
    r1 = joined.get();
  }
  // Runs one collective on both ranks; returns what each threw ("" when it finished).
  std::pair<std::string, std::string> run(ProcessGroup::Call c0, ProcessGroup::Call c1, Clock::duration timeout) {
    ++seq;
    auto attempt = [&](ShmCollectives& s, ProcessGroup::Call& c, int rank) -> std::string {
      try {
        s.run(c, seq, Clock::now() + timeout, "op on rank " + std::to_string(rank));
        return "";
      } catch (const distrl::Error& e) {
        s.abort("TransportError", e.what());  // as the group does: the other rank fails too
        return e.what();
      }
    };
    auto other = std::async(std::launch::async, [&] { return attempt(*r1, c1, 1); });
    std::string first = attempt(*r0, c0, 0);
    return {first, other.get()};
  }
};

// This process's mapping of the collectives segment, found as a third party would find it.
void* map_segment(std::size_t* bytes) {
  DIR* d = opendir("/proc/self/fd");
  void* out = nullptr;
  while (dirent* e = d ? readdir(d) : nullptr) {
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0) continue;
    if (std::string(target).find("memfd:distrl-pg") == std::string::npos) continue;
    struct stat st {};
    const int fd = ::open(link.c_str(), O_RDWR);
    if (fd < 0 || fstat(fd, &st) != 0) continue;
    out = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    *bytes = st.st_size;
    break;
  }
  if (d) closedir(d);
  return out == MAP_FAILED ? nullptr : out;
}

}  // namespace

TEST(ShmCollectivesTest, AllReduceSmallAndLargeGiveTheSumOnBothRanks) {
  ProcessGroupOptions o;
  o.chunk_bytes = 64 << 10;  // the 1 MiB tensor takes 4-byte elements through 16 chunks
  TwoRanks g(o);
  for (std::int64_t n : {7, 1000, 256 * 1024 + 3}) {
    auto a = torch::arange(n, torch::kFloat), b = torch::ones({n}) * 2;
    auto want = a + b;
    auto [e0, e1] =
        g.run(ProcessGroup::Call::all_reduce(a, ReduceOp::Sum), ProcessGroup::Call::all_reduce(b, ReduceOp::Sum), 5s);
    ASSERT_EQ(e0, "");
    ASSERT_EQ(e1, "");
    EXPECT_TRUE(torch::equal(a, want)) << n;
    EXPECT_TRUE(torch::equal(b, want)) << n;
  }
}

TEST(ShmCollectivesTest, ChunksThatAreNotWholePagesAndUnevenTensorsWork) {
  ProcessGroupOptions o;
  o.chunk_bytes = 100000;  // slots of 100,032 bytes: the segment is no whole number of pages
  o.small_bytes = 1024;
  TwoRanks g(o);
  for (std::int64_t n : {1, 255, 25001, 77777}) {  // one element, small path, chunk edges, several chunks
    auto a = torch::arange(n, torch::kDouble), b = -torch::arange(n, torch::kDouble) * 3;
    auto want = torch::max(a, b);
    auto [e0, e1] =
        g.run(ProcessGroup::Call::all_reduce(a, ReduceOp::Max), ProcessGroup::Call::all_reduce(b, ReduceOp::Max), 5s);
    ASSERT_EQ(e0, "");
    ASSERT_EQ(e1, "");
    EXPECT_TRUE(torch::equal(a, want) && torch::equal(b, want)) << n;
  }
}

TEST(ShmCollectivesTest, RanksWithDifferentAlgorithmOptionsAreRefusedAtJoin) {
  ProcessGroupOptions o0, o1;
  o1.small_bytes = o0.small_bytes / 2;  // would take another all_reduce path for some sizes
  std::string why;
  auto r0 = ShmCollectives::host(2, o0, &why);
  ASSERT_NE(r0, nullptr) << why;
  auto joined =
      std::async(std::launch::async, [&] { return ShmCollectives::join(r0->address(), 1, 2, o1, Clock::now() + 5s); });
  r0->admit_members(Clock::now() + 5s);
  try {
    joined.get();
    FAIL() << "joined with another small_bytes";
  } catch (const distrl::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("small_bytes"), std::string::npos) << e.what();
  }
}

TEST(ShmCollectivesTest, AMissingRankTimesOutNamingIt) {
  TwoRanks g(ProcessGroupOptions{});
  auto t = torch::ones({4});
  auto c = ProcessGroup::Call::all_reduce(t, ReduceOp::Sum);
  const auto start = Clock::now();
  try {
    g.r0->run(c, 1, Clock::now() + 300ms, "all_reduce on rank 0");
    FAIL() << "rank 1 never came";
  } catch (const distrl::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(ShmCollectivesTest, AClosedPeerIsNamedWhileWaitingForIt) {
  TwoRanks g(ProcessGroupOptions{});
  g.r1.reset();  // its socket closes, as a killed process's would
  auto t = torch::ones({4});
  auto c = ProcessGroup::Call::barrier();
  try {
    g.r0->run(c, 1, Clock::now() + 30s, "barrier on rank 0");
    FAIL() << "rank 1 is gone";
  } catch (const distrl::TimeoutError& e) {
    FAIL() << "waited out the deadline: " << e.what();
  } catch (const distrl::TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 is gone"), std::string::npos) << e.what();
  }
}

// Scribbles random bytes over [from, bytes) of the segment while `runs` collectives run on both
// ranks (small and chunked all_reduce, barriers); returns how many failed.
int run_under_scribbling(TwoRanks& g, std::size_t from, int runs) {
  std::size_t bytes = 0;
  auto* seg = static_cast<unsigned char*>(map_segment(&bytes));
  EXPECT_NE(seg, nullptr) << "no memfd:distrl-pg among this process's descriptors";
  if (seg == nullptr) return -1;
  std::atomic<bool> stop{false};
  std::atomic<long> scribbles{0};
  std::thread scribbler([&] {
    std::mt19937_64 rng(7);
    while (!stop) {
      const std::size_t at = from + rng() % (bytes - from);
      const std::size_t len = std::min<std::size_t>(1 + rng() % 64, bytes - at);
      for (std::size_t i = 0; i < len; ++i) seg[at + i] = static_cast<unsigned char>(rng());
      if (from == 0 && rng() % 4 == 0) std::memset(seg, 0xff, 4096);  // every control word all ones
      ++scribbles;
    }
  });
  int failed = 0;
  for (int i = 0; i < runs; ++i) {
    // Fresh garbage before each collective, however the two cores are shared (under a loaded
    // ctest the scribbler was once not scheduled during all 60 collectives).
    const long seen = scribbles.load();
    while (scribbles.load() < seen + 8) std::this_thread::yield();
    const std::int64_t n = i % 2 ? 100 : 20000;  // small (one barrier) and large (chunked) paths
    auto a = torch::ones({n}), b = torch::ones({n});
    const auto start = Clock::now();
    auto [e0, e1] =
        g.run(i % 3 ? ProcessGroup::Call::all_reduce(a, ReduceOp::Max) : ProcessGroup::Call::barrier(),
              i % 3 ? ProcessGroup::Call::all_reduce(b, ReduceOp::Max) : ProcessGroup::Call::barrier(), 200ms);
    EXPECT_LT(Clock::now() - start, 3s) << "collective " << i << " ran past its deadline";
    failed += !e0.empty() || !e1.empty();
  }
  stop = true;
  scribbler.join();
  munmap(seg, bytes);
  return failed;
}

TEST(ShmCollectivesTest, GarbageInTheDataSlotsIsOnlyGarbageData) {
  ProcessGroupOptions o;
  o.chunk_bytes = 16 << 10;
  TwoRanks g(o);
  EXPECT_EQ(run_under_scribbling(g, 4096, 60), 0);  // the slots start at the second page
}

TEST(ShmCollectivesTest, GarbageInEveryWordNeverCrashesOrHangs) {
  ProcessGroupOptions o;
  o.chunk_bytes = 16 << 10;
  TwoRanks g(o);
  EXPECT_GT(run_under_scribbling(g, 0, 60), 0) << "garbage in every control word and not one collective noticed";
}
