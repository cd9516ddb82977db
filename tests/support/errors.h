// The message of the error fn throws, for tests that check what a refusal names.
#pragma once

#include <string>

#include "common/error.h"

namespace distrl::testing {

// What fn's exception of type E says; "" when fn returns (another exception type propagates).
template <typename E = distrl::Error, typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace distrl::testing
