// distrl-bench env: single-threaded steps/s of each environment with random actions (resets
// included, counted as the steps they take), the raw speed an observer can step at: --steps
// per env, or --seconds, whichever comes first.
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <vector>

#include "envs/env.h"
#include "envs/random.h"
#include "tools/bench.h"

namespace distrl::tools {

int run_env_bench(const EnvBenchOptions& o) {
  std::ofstream csv = open_csv(o.csv);
  csv << "env,steps,episodes,seconds,steps_per_s,us_per_step\n";
  std::cout << "environment steps, one thread, random actions\n"
            << machine_description() << "\n\n"
            << "| env | steps | episodes | steps/s | µs per step |\n|---|---:|---:|---:|---:|\n";
  for (const auto& name : o.envs) {
    auto env = envs::make_env(name);
    const auto act = env->action_space();
    std::vector<float> obs(env->observation_space().dim()), action(act.dim());
    envs::Rng rng(1);
    // The clock starts after a warm-up episode.
    env->reset(0, obs.data());
    long long episodes = 0;
    auto one = [&] {
      envs::Step s;
      if (act.kind == envs::Space::Kind::Discrete) {
        s = env->step(static_cast<int>(rng.uniform() * act.n), obs.data());
      } else {
        for (int i = 0; i < act.dim(); ++i) action[i] = static_cast<float>(rng.uniform(act.low[i], act.high[i]));
        s = env->step(action.data(), obs.data());
      }
      if (s.done()) {
        env->reset(obs.data());
        ++episodes;
      }
    };
    for (int i = 0; i < 1000; ++i) one();
    episodes = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    long long steps = 0;
    while (steps < o.steps && (steps % 1000 != 0 || elapsed() < o.seconds)) {
      one();
      ++steps;
    }
    const double sec = elapsed();
    const double rate = steps / sec;
    csv << name << ',' << steps << ',' << episodes << ',' << sec << ',' << rate << ',' << 1e6 / rate << '\n';
    std::cout << "| " << name << " | " << steps << " | " << episodes << " | " << std::fixed << std::setprecision(0)
              << rate << " | " << std::setprecision(3) << 1e6 / rate << " |\n";
  }
  std::cout << "\nwrote " << o.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
