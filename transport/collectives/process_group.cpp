#include "transport/collectives/process_group.h"

#include <c10/core/ScalarType.h>

#include "transport/collectives/detail/reduce_ops.h"
#include "transport/bootstrap/rendezvous.h"

namespace distrl::transport {

namespace detail {
// pg_nccl.cpp: throws ConfigError (with the reason) unless NCCL can run here.
int check_nccl_usable();
std::shared_ptr<ProcessGroup> make_nccl_process_group(Store& store, int rank, int world_size,
                                                      const ProcessGroupOptions& options,
                                                      std::shared_ptr<void> keepalive);
std::shared_ptr<ProcessGroup> make_zmq_process_group(Store& store, int rank, int world_size,
                                                     const ProcessGroupOptions& options, const std::string& prefix,
                                                     std::shared_ptr<void> keepalive);
}  // namespace detail

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Product: return "product";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

std::string describe_tensor(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(c10::toString(t.scalar_type())) + "[" + std::to_string(t.numel()) + "]";
}

const char* ProcessGroup::name(Kind k) {
  switch (k) {
    case Kind::Broadcast: return "broadcast";
    case Kind::Reduce: return "reduce";
    case Kind::AllReduce: return "all_reduce";
    case Kind::AllGather: return "all_gather";
    case Kind::Gather: return "gather";
    case Kind::Scatter: return "scatter";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::Barrier: return "barrier";
  }
  return "?";
}

void ProcessGroup::check_call(const Call& c) const {
  const std::string where = std::string(name(c.kind)) + " on rank " + std::to_string(rank_) + ": ";
  auto bad = [&](const std::string& what) { throw ArgumentError(where + what); };
  auto check_tensor = [&](const at::Tensor& t, const char* role) {
    if (!t.defined()) bad(std::string(role) + " is an undefined tensor");
    if (!t.is_contiguous())
      bad(std::string(role) + " " + describe_tensor(t) + " is not contiguous (call .contiguous())");
  };
  const bool reduces = c.kind == Kind::Reduce || c.kind == Kind::AllReduce || c.kind == Kind::ReduceScatter;
  const bool rooted =
      c.kind == Kind::Broadcast || c.kind == Kind::Reduce || c.kind == Kind::Gather || c.kind == Kind::Scatter;
  if (rooted && (c.root < 0 || c.root >= size_))
    bad("root " + std::to_string(c.root) + " is not a rank of this group of " + std::to_string(size_));
  const at::Tensor* ref = nullptr;
  for (const auto& t : c.tensors) check_tensor(t, "a tensor");
  if (c.single.defined() || c.kind == Kind::AllGather || c.kind == Kind::Gather || c.kind == Kind::Scatter ||
      c.kind == Kind::ReduceScatter)
    check_tensor(c.single, c.kind == Kind::Scatter || c.kind == Kind::ReduceScatter ? "the output" : "the input");
  switch (c.kind) {
    case Kind::Broadcast:
    case Kind::Reduce:
    case Kind::AllReduce:
      if (c.tensors.size() != 1) bad("expects one tensor");
      ref = &c.tensors[0];
      break;
    case Kind::AllGather:
    case Kind::ReduceScatter:
      ref = &c.single;
      if (c.tensors.size() != static_cast<std::size_t>(size_))
        bad("the list holds " + std::to_string(c.tensors.size()) + " tensors, the group has " + std::to_string(size_) +
            " ranks");
      break;
    case Kind::Gather:
    case Kind::Scatter: {
      ref = &c.single;
      const std::size_t want = rank_ == c.root ? static_cast<std::size_t>(size_) : 0;
      if (c.tensors.size() != want)
        bad("the list holds " + std::to_string(c.tensors.size()) + " tensors; pass " + std::to_string(want) +
            (rank_ == c.root ? " (one per rank) on the root" : " (an empty list) on ranks other than the root"));
      break;
    }
    case Kind::Barrier: return;
  }
  for (const auto& t : c.tensors)
    if (t.scalar_type() != ref->scalar_type() || t.numel() != ref->numel())
      bad("list tensor " + describe_tensor(t) + " does not match " + describe_tensor(*ref) +
          " (all must have one dtype and element count)");
  if (reduces && !detail::reducible(ref->scalar_type()))
    bad(std::string("cannot reduce dtype ") + c10::toString(ref->scalar_type()));
  if (reduces && c.op == ReduceOp::Avg && ref->scalar_type() == c10::ScalarType::Bool)
    bad("avg is not defined for bool tensors");
}

std::shared_ptr<ProcessGroup> make_zmq_process_group(Store& store, int rank, int world_size,
                                                     const ProcessGroupOptions& options, const std::string& prefix) {
  return detail::make_zmq_process_group(store, rank, world_size, options, prefix, nullptr);
}

std::shared_ptr<ProcessGroup> init_process_group(const ProcessGroupOptions& options) {
  if (options.backend != "zmq" && options.backend != "nccl")
    throw ConfigError("process group: backend is '" + options.backend + "', allowed: zmq, nccl");
  if (options.timeout.count() <= 0) throw ConfigError("process group: timeout must be positive");
  if (options.backend == "nccl") detail::check_nccl_usable();  // before rendezvous: no rank waits for a failed one
  const WorldSpec w = resolve_world(options.init_method, options.rank, options.world_size);
  auto rdv = std::make_shared<Rendezvous>(w, options.timeout);
  ProcessGroupOptions o = options;
  o.rank = w.rank;
  o.world_size = w.world_size;
  if (options.backend == "nccl") return detail::make_nccl_process_group(rdv->store(), w.rank, w.world_size, o, rdv);
  return detail::make_zmq_process_group(rdv->store(), w.rank, w.world_size, o, "pg", rdv);
}

}  // namespace distrl::transport
