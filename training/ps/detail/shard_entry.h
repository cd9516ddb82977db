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

// "[2, 3] Float", or "(none)": for errors.
inline std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::ostringstream s;
  s << t.sizes() << " " << t.scalar_type();
  return s.str();
}

inline std::int64_t bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; }

}  // namespace distrl::training::ps
