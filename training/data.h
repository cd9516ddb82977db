// Datasets for config-driven training, and the distributed sampler.
//
// IDX files (the MNIST layout: big-endian magic 0x0803 + dims + uint8 images, 0x0801 + count +
// uint8 labels), raw or gzipped, any number of items: MNIST, Fashion-MNIST (Debian's
// dataset-fashion-mnist puts it in /usr/share/datasets/fashion-mnist), or files you make.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace distrl::training {

struct Dataset {
  std::string name;
  at::Tensor inputs;   // [N, ...] float32 (images: [N, 1, H, W], normalised)
  at::Tensor targets;  // [N] int64 class labels, or [N, k] float32 regression targets
  std::int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
};

// One IDX image file + label file. Throws ConfigError naming the file and what is wrong.
Dataset load_idx(const std::string& images_path, const std::string& labels_path);
// The same for the files' bytes (after gunzip); the names are used in errors.
Dataset parse_idx(const std::string& images, const std::string& labels, const std::string& images_name,
                  const std::string& labels_name);
// The train or test split in dir: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
Dataset load_idx_dir(const std::string& dir, bool train);
// The four files load_idx_dir reads (train and test) are there: what --check-config can say
// before anything starts (only there: a rank that loads no data may lack them). ConfigError
// naming the missing one and where to get it.
void check_idx_dir(const std::string& dir);
// Writes IDX files (gzipped when the name ends in .gz): images uint8 [N, H, W], labels uint8 [N].
void write_idx(const std::string& images_path, const std::string& labels_path, const at::Tensor& images,
               const at::Tensor& labels);
// Every regular file under path (or path itself), in name order, concatenated, cut at
// max_chars (0: all): the text corpora (Debian's /usr/share/common-licenses by default).
// Throws ConfigError (key data.path) when there is no text or under 1000 characters.
std::string read_text(const std::string& path, long long max_chars = 0);
// read_text would find files at path (does not read them). ConfigError otherwise.
void check_text_path(const std::string& path);
// The first n items of d (all of them when n <= 0 or n >= d.size()).
Dataset first_items(Dataset d, std::int64_t n);
// The DDP tutorial's toy regression: x ~ N(0, 1)^in, y = W x + 0.1 noise with a fixed W [out, in].
Dataset make_toy(std::int64_t n, int in, int out, std::uint64_t seed);

// Partitions [0, size) over the ranks like torch's DistributedSampler (the tutorial's
// DataPartitioner): the same permutation on every rank (seed + epoch), padded by wrapping so
// every rank gets the same number of indices (drop_last: truncated instead).
class DistributedSampler {
 public:
  DistributedSampler(std::int64_t size, int rank, int world, bool shuffle = true, std::uint64_t seed = 0,
                     bool drop_last = false);
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::vector<std::int64_t> indices() const;
  std::int64_t per_rank() const { return per_rank_; }

 private:
  std::int64_t size_;
  int rank_, world_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t per_rank_;
  std::int64_t epoch_ = 0;
};

}  // namespace distrl::training
