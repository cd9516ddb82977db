// Element-wise reduction kernels of the ZeroMQ process group: plain loops per dtype (the
// compiler vectorises them), no ATen dispatch on the hot path. Private to transport/.
#pragma once

#include <cstddef>
#include <cstdint>

#include <c10/core/ScalarType.h>

#include "transport/collectives/process_group.h"

namespace distrl::transport::detail {

// True for the dtypes collectives reduce: integers, floats (incl. half, bfloat16) and bool.
bool reducible(c10::ScalarType t);
// dst[i] = op(dst[i], src[i]) for n elements; Avg reduces as Sum (divide afterwards). The
// result does not depend on the operand order (IEEE + and * commute; Min/Max propagate NaN
// from either side), so every rank computes the same bits. src may be unaligned.
void reduce_into(ReduceOp op, c10::ScalarType t, void* dst, const void* src, std::size_t n);
// dst[i] /= by (integers: truncating division).
void divide(c10::ScalarType t, void* dst, std::size_t n, std::int64_t by);

}  // namespace distrl::transport::detail
