// A program built against an installed distrl (examples/consumer/CMakeLists.txt): two ranks of
// its own (it forks), one RPC call carrying a tensor, then one CartPole episode through
// distrl::envs. Exit 0 and "consumer: ok" when everything worked.
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "envs/env.h"
#include "transport/rpc/rpc_agent.h"
#include "transport/wire/tensor.h"

using distrl::transport::RpcAgent;
using distrl::transport::RpcOptions;

namespace {

// Rank 1 serves "twice"; rank 0 calls it once with a tensor. Returns the process's exit code.
int rank_main(int rank, const std::string& rendezvous) {
  RpcOptions o;
  o.init_method = "file://" + rendezvous;
  o.rank = rank;
  o.world_size = 2;
  RpcAgent agent(o, [](RpcAgent& a) { a.register_function("twice", [](at::Tensor t) { return t * 2; }); });
  int code = 0;
  if (rank == 0) {
    const at::Tensor x = torch::arange(4, torch::kFloat);
    const at::Tensor y = agent.rpc_sync<at::Tensor>(1, "twice", x);
    if (!torch::equal(y, x * 2)) {
      std::cerr << "consumer: rpc returned " << y << "\n";
      code = 1;
    }
  }
  agent.shutdown();
  return code;
}

int episode() {
  auto env = distrl::envs::make_env("CartPole-v1");
  std::vector<float> obs(env->observation_space().dim());
  env->reset(/*seed=*/1, obs.data());
  int steps = 0;
  for (distrl::envs::Step s; !s.done(); ++steps) s = env->step(steps % 2, obs.data());
  std::cout << "consumer: one CartPole episode of " << steps << " steps\n";
  return steps > 0 ? 0 : 1;
}

}  // namespace

int main() {
  const auto dir = std::filesystem::temp_directory_path() / ("distrl-consumer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string rendezvous = (dir / "rendezvous").string();
  const pid_t child = ::fork();  // before any thread or socket
  if (child == 0) ::_exit(rank_main(1, rendezvous));
  int code = rank_main(0, rendezvous);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) code = 1;
  std::filesystem::remove_all(dir);
  if (code == 0) std::cout << "consumer: rpc_sync with a tensor ok\n";
  code = code != 0 ? code : episode();
  if (code == 0) std::cout << "consumer: ok\n";
  return code;
}
