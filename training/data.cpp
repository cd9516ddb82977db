#include "training/data.h"

#include <zlib.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <fstream>
#include <random>

#include "common/error.h"

namespace distrl::training {
namespace {

// Whole file through zlib (reads plain files too).
std::string read_maybe_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw ConfigError("dataset: cannot open '" + path + "'");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw ConfigError("dataset: '" + path + "' is not readable (corrupt gzip?)");
  return out;
}

std::uint32_t be32(const std::string& s, std::size_t off) {
  return (std::uint32_t(std::uint8_t(s[off])) << 24) | (std::uint32_t(std::uint8_t(s[off + 1])) << 16) |
         (std::uint32_t(std::uint8_t(s[off + 2])) << 8) | std::uint32_t(std::uint8_t(s[off + 3]));
}

// -> dims; the uint8 payload starts after the header.
std::vector<std::int64_t> idx_dims(const std::string& data, const std::string& path, int want_ndim) {
  if (data.size() < 4 || data[0] != 0 || data[1] != 0 || std::uint8_t(data[2]) != 0x08)
    throw ConfigError("dataset: '" + path + "' is not an IDX file of unsigned bytes (bad magic)");
  const int ndim = std::uint8_t(data[3]);
  if (ndim != want_ndim)
    throw ConfigError("dataset: '" + path + "' has " + std::to_string(ndim) + " dimensions, expected " +
                      std::to_string(want_ndim));
  if (data.size() < 4 + 4 * std::size_t(ndim)) throw ConfigError("dataset: '" + path + "' is truncated (header)");
  std::vector<std::int64_t> dims;
  std::int64_t total = 1;
  const std::size_t held = data.size() - 4 - 4 * std::size_t(ndim);
  for (int i = 0; i < ndim; ++i) dims.push_back(be32(data, 4 + 4 * i));
  bool more = false;  // the header's product is past what the file holds (and may overflow)
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) {
    total = 0;
  } else {
    for (auto d : dims) {
      if (total > static_cast<std::int64_t>(held) / d) {
        more = true;
        break;
      }
      total *= d;
    }
  }
  if (more || held != std::size_t(total))
    throw ConfigError("dataset: '" + path + "' holds " + std::to_string(held) + " bytes of data, its header says " +
                      (more ? std::string("more than that") : std::to_string(total)));
  return dims;
}

void write_file(const std::string& path, const std::string& bytes) {
  const bool gz = path.size() > 3 && path.substr(path.size() - 3) == ".gz";
  gzFile f = gzopen(path.c_str(), gz ? "wb" : "wbT");
  if (!f) throw ConfigError("dataset: cannot write '" + path + "'");
  const int n = gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  if (n != static_cast<int>(bytes.size())) throw ConfigError("dataset: short write to '" + path + "'");
}

std::string idx_header(std::uint8_t ndim, const std::vector<std::int64_t>& dims) {
  std::string h{0, 0, 0x08, static_cast<char>(ndim)};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>((d >> s) & 0xff));
  return h;
}

}  // namespace

Dataset parse_idx(const std::string& img, const std::string& lab, const std::string& images_name,
                  const std::string& labels_name) {
  const auto idims = idx_dims(img, images_name, 3), ldims = idx_dims(lab, labels_name, 1);
  for (int i : {1, 2})
    if (idims[i] < 1 || idims[i] > 65535)
      throw ConfigError("dataset: '" + images_name + "' has images of " + std::to_string(idims[1]) + " x " +
                        std::to_string(idims[2]) + " pixels (each side must be 1..65535)");
  if (idims[0] != ldims[0])
    throw ConfigError("dataset: '" + images_name + "' holds " + std::to_string(idims[0]) + " images but '" +
                      labels_name + "' " + std::to_string(ldims[0]) + " labels");
  Dataset d;
  d.name = std::filesystem::path(images_name).parent_path().filename().string();
  auto raw = torch::from_blob(const_cast<char*>(img.data() + 16), {idims[0], 1, idims[1], idims[2]}, torch::kUInt8);
  d.inputs = (raw.to(torch::kFloat32) / 255.0 - 0.5) / 0.5;  // to [-1, 1]
  d.targets = torch::from_blob(const_cast<char*>(lab.data() + 8), {ldims[0]}, torch::kUInt8).to(torch::kInt64);
  return d;
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  return parse_idx(read_maybe_gz(images_path), read_maybe_gz(labels_path), images_path, labels_path);
}

namespace {

// dir/stem or dir/stem.gz; ConfigError naming what is missing and where to get it.
std::string idx_file(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem, stem + ".gz"}) {
    const auto p = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(p)) return p.string();
  }
  throw ConfigError("dataset: no " + stem + "[.gz] in '" + dir +
                    "' (an MNIST-layout directory; Fashion-MNIST: apt install dataset-fashion-mnist)");
}

}  // namespace

Dataset load_idx_dir(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images = idx_file(dir, prefix + "-images-idx3-ubyte");
  return load_idx(images, idx_file(dir, prefix + "-labels-idx1-ubyte"));
}

void check_idx_dir(const std::string& dir) {
  for (const char* prefix : {"train", "t10k"})
    for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) idx_file(dir, std::string(prefix) + kind);
}

void write_idx(const std::string& images_path, const std::string& labels_path, const at::Tensor& images,
               const at::Tensor& labels) {
  if (images.dim() != 3 || labels.dim() != 1 || images.size(0) != labels.size(0))
    throw ArgumentError("write_idx: want images [N, H, W] and labels [N]");
  auto img = images.to(torch::kUInt8).contiguous();
  auto lab = labels.to(torch::kUInt8).contiguous();
  std::string a = idx_header(3, {img.size(0), img.size(1), img.size(2)});
  a.append(static_cast<const char*>(img.data_ptr()), img.numel());
  std::string b = idx_header(1, {lab.size(0)});
  b.append(static_cast<const char*>(lab.data_ptr()), lab.numel());
  write_file(images_path, a);
  write_file(labels_path, b);
}

Dataset first_items(Dataset d, std::int64_t n) {
  if (n > 0 && n < d.size()) {
    d.inputs = d.inputs.narrow(0, 0, n);
    d.targets = d.targets.narrow(0, 0, n);
  }
  return d;
}

Dataset make_toy(std::int64_t n, int in, int out, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Dataset d;
  d.name = "toy";
  auto w = at::randn({out, in}, gen);
  d.inputs = at::randn({n, in}, gen);
  d.targets = d.inputs.matmul(w.t()) + 0.1 * at::randn({n, out}, gen);
  return d;
}

DistributedSampler::DistributedSampler(std::int64_t size, int rank, int world, bool shuffle, std::uint64_t seed,
                                       bool drop_last)
    : size_(size), rank_(rank), world_(world), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  if (world < 1 || rank < 0 || rank >= world) throw ArgumentError("DistributedSampler: bad rank/world");
  if (size < 1) throw ArgumentError("DistributedSampler: the dataset is empty");
  per_rank_ = drop_last ? size / world : (size + world - 1) / world;
  if (per_rank_ == 0)
    throw ArgumentError("DistributedSampler: " + std::to_string(size) + " samples cannot be split over " +
                        std::to_string(world) + " ranks with drop_last");
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> all(size_);
  std::iota(all.begin(), all.end(), 0);
  if (shuffle_) {
    std::mt19937_64 rng(seed_ + static_cast<std::uint64_t>(epoch_));
    std::shuffle(all.begin(), all.end(), rng);
  }
  std::vector<std::int64_t> mine;
  mine.reserve(per_rank_);
  for (std::int64_t k = 0; k < per_rank_; ++k) mine.push_back(all[(rank_ + k * world_) % size_]);
  return mine;
}

namespace {

// The files of a text corpus: path itself, or the files under it in name order; ConfigError when none.
std::vector<std::filesystem::path> text_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (auto& e : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  }
  if (files.empty())
    throw ConfigError("data.path: no text files at '" + path + "' (on Debian, /usr/share/common-licenses has plenty)");
  return files;
}

}  // namespace

void check_text_path(const std::string& path) { text_files(path); }

std::string read_text(const std::string& path, long long max_chars) {
  const auto files = text_files(path);
  std::string text;
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    if (max_chars > 0 && static_cast<long long>(text.size()) >= max_chars) {
      text.resize(static_cast<std::size_t>(max_chars));
      break;
    }
  }
  if (text.size() < 1000)
    throw ConfigError("data.path: only " + std::to_string(text.size()) + " characters at '" + path +
                      "'; need at least 1000");
  return text;
}

}  // namespace distrl::training
