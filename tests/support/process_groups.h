// Test helpers for process groups: forked ranks, each joined to one group through a file://
// rendezvous in a temp dir. Children report through exit codes (see multiproc.h).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "tests/support/multiproc.h"
#include "transport/collectives/process_group.h"

namespace distrl::testing {

// Throws (so the child exits 1 and prints what) unless ok.
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

inline std::shared_ptr<transport::ProcessGroup> join_group(const TempDir& dir, int rank, int world,
                                                           transport::ProcessGroupOptions o = {}) {
  o.init_method = "file://" + dir.file("rendezvous");
  o.rank = rank;
  o.world_size = world;
  if (o.timeout == transport::ProcessGroupOptions{}.timeout) o.timeout = std::chrono::seconds(30);
  return transport::init_process_group(o);
}

// Runs fn on `world` forked ranks with their group; every rank must return 0.
inline void run_group(int world,
                      const std::function<int(int rank, const std::shared_ptr<transport::ProcessGroup>& pg)>& fn,
                      const transport::ProcessGroupOptions& options = {}) {
  TempDir dir;
  auto codes = run_ranks(world, [&](int rank) { return fn(rank, join_group(dir, rank, world, options)); });
  for (int r = 0; r < world; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

}  // namespace distrl::testing
