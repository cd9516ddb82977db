// The RPC options of a training tool's rank, from its world flags (--rank, --world-size,
// --init-method, ...) and the config's deadline and transport: one deadline for every call
// and for rendezvous.
#pragma once

#include <ATen/Parallel.h>

#include <chrono>
#include <string>

#include "common/command_line.h"
#include "models/torch_threads.h"
#include "transport/rpc/options.h"

namespace distrl::training {

// torch_threads (run.torch_threads) is applied here, before the agent's threads exist, and
// adopted by each of them (RpcOptions::thread_init): the handlers run the model.
inline transport::RpcOptions rpc_options_for(const WorldFlags& world, double timeout_s, const std::string& transport,
                                             int torch_threads) {
  models::set_torch_threads(torch_threads);
  transport::RpcOptions o =
      transport::rank_options(world.rank, world.world_size, world.resolved_init_method(),
                              std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)), transport);
  o.rendezvous_timeout = o.rpc_timeout;
  o.thread_init = [] { at::init_num_threads(); };
  return o;
}

}  // namespace distrl::training
