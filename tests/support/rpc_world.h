// Test helpers for forked RPC worlds: options for rank `rank` of `world` meeting through a
// file in dir (no ports), with the deadlines the integration tests use, and expect(), which
// a child uses to fail (run_ranks turns the exception into exit code 1).
#pragma once

#include <stdexcept>
#include <string>

#include "tests/support/multiproc.h"
#include "transport/rpc/options.h"

namespace distrl::testing {

inline transport::RpcOptions rpc_options(const TempDir& dir, int rank, int world,
                                         const std::string& transport = "auto") {
  using namespace std::chrono_literals;
  transport::RpcOptions o = transport::rank_options(rank, world, "file://" + dir.file("rendezvous"), 20s, transport);
  o.rendezvous_timeout = 30s;
  o.shutdown_timeout = 30s;
  return o;
}

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("expectation failed: " + what);
}

}  // namespace distrl::testing
