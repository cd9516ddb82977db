// distrl-bench env: single-threaded steps/s of each environment with random actions (resets
// included, counted as the steps they take), the raw speed an observer can step at: n envs
// stepped together per call (--batch, as an observer's VecEnv of env.per_observer envs; for
// gymnasium:ID one Python child steps them all), --steps env steps per row, or --seconds,
// whichever comes first.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <vector>

#include "envs/random.h"
#include "envs/vec_env.h"
#include "tools/bench.h"

namespace distrl::tools {

int run_env_bench(const EnvBenchOptions& o) {
  std::ofstream csv = open_csv(o.csv);
  csv << "env,batch,steps,episodes,seconds,steps_per_s,us_per_step\n";
  std::cout << "environment steps, one thread, random actions, n envs per call\n"
            << machine_description() << "\n\n"
            << "| env | n | steps | episodes | steps/s | µs per step |\n|---|---:|---:|---:|---:|---:|\n";
  for (const auto& name : o.envs) {
    for (const int n : o.batches) {
      envs::VecEnv venv(name, n, /*seed=*/0, /*autoreset=*/true);
      const auto& act = venv.action_space();
      std::vector<int> discrete(n);
      std::vector<float> continuous(static_cast<std::size_t>(n) * act.dim());
      envs::Rng rng(1);
      long long episodes = 0;
      auto one = [&] {  // n env steps
        if (act.kind == envs::Space::Kind::Discrete) {
          for (auto& a : discrete) a = static_cast<int>(rng.uniform() * act.n);
          venv.step(discrete.data());
        } else {
          for (std::size_t i = 0; i < continuous.size(); ++i) {
            const auto k = i % static_cast<std::size_t>(act.dim());
            continuous[i] = static_cast<float>(rng.uniform(act.low[k], act.high[k]));
          }
          venv.step(continuous.data());
        }
        for (int i = 0; i < n; ++i) episodes += venv.terminated()[i] || venv.truncated()[i];
      };
      // The clock starts after 1,000 warm-up env steps.
      venv.reset_all();
      for (long long s = 0; s < 1000; s += n) one();
      episodes = 0;
      const auto start = std::chrono::steady_clock::now();
      const auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      };
      long long steps = 0, calls = 0;
      const long long check_every = std::max(1, 1000 / n);  // the clock is read every ~1,000 env steps
      while (steps < o.steps && (calls % check_every != 0 || elapsed() < o.seconds)) {
        one();
        steps += n;
        ++calls;
      }
      const double sec = elapsed();
      const double rate = steps / sec;
      csv << name << ',' << n << ',' << steps << ',' << episodes << ',' << sec << ',' << rate << ',' << 1e6 / rate
          << '\n';
      std::cout << "| " << name << " | " << n << " | " << steps << " | " << episodes << " | " << std::fixed
                << std::setprecision(0) << rate << " | " << std::setprecision(3) << 1e6 / rate << " |\n";
    }
  }
  std::cout << "\nwrote " << o.csv << "\n";
  return 0;
}

}  // namespace distrl::tools
