// Test helpers for process groups: forked ranks, each joined to one group through a file://
// rendezvous in a temp dir. Children report through exit codes (see multiproc.h).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
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

// A group that forwards another's point-to-point calls and counts what this rank issued:
// sends, receives and collectives (these are counted and refused: a caller that is meant to use
// none fails loudly). `backend` replaces the name backend() reports (a stage runtime that asks
// for "nccl" sees it, without NCCL).
class CountingGroup : public transport::ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<transport::ProcessGroup> inner, std::string backend = "")
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), backend_(std::move(backend)) {}
  std::string backend() const override { return backend_.empty() ? inner_->backend() : backend_; }
  transport::WorkPtr isend(const at::Tensor& t, int dst, int tag) override {
    ++sends;
    return inner_->isend(t, dst, tag);
  }
  transport::WorkPtr irecv(const at::Tensor& t, int src, int tag) override {
    ++receives;
    return inner_->irecv(t, src, tag);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override { return inner_->new_group(ranks); }
  int issued() const { return sends + receives + collectives; }

  std::atomic<int> sends{0}, receives{0}, collectives{0};

 protected:
  transport::WorkPtr run(Call call, bool) override {
    ++collectives;
    throw std::logic_error(std::string("CountingGroup: ") + name(call.kind) + " is counted, not forwarded");
  }

 private:
  std::shared_ptr<transport::ProcessGroup> inner_;
  std::string backend_;
};

}  // namespace distrl::testing
