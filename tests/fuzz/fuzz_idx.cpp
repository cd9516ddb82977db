// The IDX reader (MNIST-layout datasets: distrl-train, the DDP and pipeline workloads) on an
// image file and a label file's bytes. A bad file must be a ConfigError naming it; a good one
// gives as many images as labels, each image the size its header says.
#include <ATen/ATen.h>

#include "common/error.h"
#include "tests/fuzz/fuzz_input.h"
#include "training/data.h"

namespace distrl::fuzz {
namespace {

std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string images(std::uint32_t n, std::uint32_t h, std::uint32_t w) {
  std::string s{0, 0, 8, 3};
  s += be32(n) + be32(h) + be32(w);
  for (std::uint32_t i = 0; i < n * h * w; ++i) s.push_back(static_cast<char>(i * 37));
  return s;
}

std::string labels(std::uint32_t n) {
  std::string s{0, 0, 8, 1};
  s += be32(n);
  for (std::uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}

}  // namespace

int fuzz_idx(const std::uint8_t* data, std::size_t size) {
  auto parts = split_frames(data, size, 2);
  if (parts.size() < 2) return 0;
  try {
    auto d = training::parse_idx(parts[0], parts[1], "fuzz/train-images-idx3-ubyte", "fuzz/train-labels-idx1-ubyte");
    FUZZ_CHECK(d.inputs.dim() == 4 && d.targets.dim() == 1 && d.inputs.size(0) == d.targets.size(0));
    FUZZ_CHECK(static_cast<std::size_t>(d.inputs.numel()) + 16 == parts[0].size());
    FUZZ_CHECK(d.inputs.numel() == 0 ||
               (d.inputs.min().item<float>() >= -1.0f && d.inputs.max().item<float>() <= 1.0f));
  } catch (const ConfigError&) {}
  return 0;
}

std::vector<std::string> seeds_idx() {
  return {join_frames({images(3, 4, 5), labels(3)}), join_frames({images(0, 28, 28), labels(0)}),
          join_frames({images(2, 1, 1), labels(3)}), join_frames({images(1, 28, 28), labels(1)})};
}

}  // namespace distrl::fuzz

DISTRL_FUZZ_ENTRY(distrl::fuzz::fuzz_idx)
