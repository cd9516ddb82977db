// The one exception-to-exit-code mapping every executable uses (house style):
// ConfigError -> 2, any other exception -> 1, each printed as "<tool>: <message>". First it
// keeps a run.out_dir claim inherited from distrl-launch to this process (RunLock).
#pragma once

#include <functional>
#include <iostream>

#include "common/error.h"
#include "common/run_lock.h"

namespace distrl {

inline int guarded_main(const char* tool, const std::function<int()>& body) {
  RunLock::keep_inherited_claim_here();
  try {
    return body();
  } catch (const ConfigError& e) {
    std::cerr << tool << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << tool << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace distrl
