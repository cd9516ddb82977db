#include "tests/fuzz/fuzz_input.h"

namespace distrl::fuzz {

#define DISTRL_FUZZ_DECLARE(name)                    \
  int fuzz_##name(const std::uint8_t*, std::size_t); \
  std::vector<std::string> seeds_##name();
DISTRL_FUZZ_DECLARE(rpc)
DISTRL_FUZZ_DECLARE(store)
DISTRL_FUZZ_DECLARE(pg)
DISTRL_FUZZ_DECLARE(settings)
DISTRL_FUZZ_DECLARE(idx)
DISTRL_FUZZ_DECLARE(ring)
#undef DISTRL_FUZZ_DECLARE

const std::vector<Target>& fuzz_targets() {
  static const std::vector<Target> targets{{"rpc", fuzz_rpc, seeds_rpc}, {"store", fuzz_store, seeds_store},
                                           {"pg", fuzz_pg, seeds_pg},    {"settings", fuzz_settings, seeds_settings},
                                           {"idx", fuzz_idx, seeds_idx}, {"ring", fuzz_ring, seeds_ring}};
  return targets;
}

}  // namespace distrl::fuzz
