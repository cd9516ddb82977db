// The IDX reader's refusals, each a ConfigError naming the file (cases the idx fuzz target
// found: a header whose dimensions multiply past int64, huge images with zero of them).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "common/error.h"
#include "training/data.h"

namespace distrl::training {
namespace {

std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string header(std::uint8_t ndim, const std::vector<std::uint32_t>& dims) {
  std::string s{0, 0, 8, static_cast<char>(ndim)};
  for (auto d : dims) s += be32(d);
  return s;
}

std::string error_of(const std::string& images, const std::string& labels) {
  try {
    parse_idx(images, labels, "d/train-images", "d/train-labels");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(IdxTest, ReadsImagesAndLabels) {
  const auto d = parse_idx(header(3, {2, 2, 3}) + std::string(12, '\xff'), header(1, {2}) + "\x01\x07", "d/i", "d/l");
  EXPECT_EQ(d.inputs.sizes(), (std::vector<std::int64_t>{2, 1, 2, 3}));
  EXPECT_FLOAT_EQ(d.inputs.max().item<float>(), 1.0f);
  EXPECT_EQ(d.targets[1].item<std::int64_t>(), 7);
}

TEST(IdxTest, BadFilesAreConfigErrorsNamingTheFile) {
  const std::string labels = header(1, {1}) + "\x01";
  EXPECT_NE(error_of("\x01\x02", labels).find("'d/train-images' is not an IDX file"), std::string::npos);
  EXPECT_NE(error_of(header(3, {1, 2}), labels).find("truncated"), std::string::npos);
  // 2^32-1 cubed overflows int64: refused, not wrapped
  EXPECT_NE(error_of(header(3, {0xffffffff, 0xffffffff, 0xffffffff}) + "xx", labels).find("more than that"),
            std::string::npos);
  EXPECT_NE(error_of(header(3, {0, 0xa1439701, 0xd0a30000}), header(1, {0})).find("each side must be 1..65535"),
            std::string::npos);
  EXPECT_NE(error_of(header(3, {2, 1, 1}) + "ab", labels).find("2 images but 'd/train-labels' 1 labels"),
            std::string::npos);
}

}  // namespace
}  // namespace distrl::training
