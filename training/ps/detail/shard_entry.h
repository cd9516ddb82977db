// One key of a parameter-server shard (ShardServer's private state, shared by its sources).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "training/ps/protocol.h"
#include "training/ps/server.h"

namespace distrl::training::ps {

struct ShardServer::Entry {
  std::string name;
  at::Tensor value;  // dense: the tensor; table: this shard's rows [local_rows, dim]
  bool table = false;
  std::int64_t global_rows = 0;
  // optimizer state (zeros on first use): sgd momentum / adagrad sum / adam m (m1), adam v (m2);
  // steps: a count (dense) or one per local row (table, float64 [rows])
  at::Tensor m1, m2, steps;
  // the open sync round: what its pushes carried, summed in the order they joined it
  at::Tensor acc;  // dense
  std::vector<at::Tensor> acc_rows, acc_grads;
  // statistics
  KeyStats stats;
  at::Tensor row_pushes;            // table: int64 [local_rows]
  std::vector<std::int32_t> first;  // table: apply_locked's scratch, row -> first index in a push (-1 between)
};

// Asks for the cache line at p ahead of its use: rows of a table are scattered over more memory
// than the caches hold. Written out on x86: GCC 12 dropped __builtin_prefetch from the rows'
// loops (no prefetch instruction in the object file; docs/benchmarks.md, sparse rows, 2026-11-29).
inline void prefetch_line(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

// Asks for every cache line of a row of `bytes` bytes at `row`.
inline void prefetch_row(const void* row, std::size_t bytes) {
  for (std::size_t b = 0; b < bytes; b += 64) prefetch_line(static_cast<const char*>(row) + b);
}

// Rows are fetched this many ahead of the one being read or stepped.
inline constexpr std::int64_t kPrefetchRows = 8;

// "[2, 3] Float", or "(none)": for errors.
inline std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

inline std::int64_t bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; }

}  // namespace distrl::training::ps
