#include "models/torch_threads.h"

#include <dlfcn.h>

#include <ATen/Parallel.h>

namespace distrl::models {

void set_torch_threads(int n) {
  at::set_num_threads(n);
  using SetThreads = void (*)(int);
  if (auto* openblas = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) openblas(n);
}

}  // namespace distrl::models
