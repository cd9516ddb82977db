// How many threads LibTorch's CPU kernels use in this process: one call that reaches every
// pool a kernel may run on. at::set_num_threads sets OpenMP's (and MKL's) but not OpenBLAS's,
// whose worker threads (Debian's LibTorch does its matrix products through OpenBLAS) then
// busy-wait with sched_yield between products, stealing the CPU of the threads with work
// (docs/benchmarks.md, "Measurements behind decisions in the code").
#pragma once

namespace distrl::models {

// at::set_num_threads(n) and, when the process has OpenBLAS, openblas_set_num_threads(n)
// (looked up at run time: another BLAS is left alone). n >= 1. Call from main before work.
void set_torch_threads(int n);

}  // namespace distrl::models
