// Every fuzz target over its seeds and the committed corpus (tests/fuzz/corpus/<target>/:
// seeds plus inputs that once found a bug), in the normal build: a regression of anything
// fuzzing found fails CI without clang. The fuzzers themselves run with `make fuzz`.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "tests/fuzz/fuzz_input.h"

namespace distrl::fuzz {
namespace {}  // namespace
// gtest names a parameter by this (not by its bytes).
void PrintTo(const Target& t, std::ostream* os) { *os << t.name; }
namespace {

class FuzzReplay : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplay, SeedsAndTheCommittedCorpusRunClean) {
  const Target& t = GetParam();
  const auto seeds = t.seeds();
  ASSERT_FALSE(seeds.empty());
  for (const auto& s : seeds) EXPECT_EQ(t.run(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()), 0);
  const auto dir = std::filesystem::path(DISTRL_SOURCE_DIR) / "tests/fuzz/corpus" / t.name;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir << " is missing (make fuzz-seeds writes it)";
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    SCOPED_TRACE(e.path().string());
    EXPECT_EQ(t.run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
    ++files;
  }
  EXPECT_GE(files, seeds.size()) << "the committed corpus lacks the seeds: run make fuzz-seeds";
}

// Every prefix of every seed: truncated messages take the decoders' early-exit paths.
TEST_P(FuzzReplay, EveryTruncationOfASeedRunsClean) {
  const Target& t = GetParam();
  for (const auto& s : t.seeds())
    for (std::size_t n = 0; n < s.size(); n += 1 + s.size() / 64)
      EXPECT_EQ(t.run(reinterpret_cast<const std::uint8_t*>(s.data()), n), 0);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, ::testing::ValuesIn(fuzz_targets()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace distrl::fuzz
