// distrl-render: play one episode of an environment and write it as an animated GIF, so a
// person can see what the lander (or the cart) does.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "common/error.h"
#include "common/main_guard.h"
#include "envs/bipedal_walker.h"
#include "envs/lunar_lander.h"
#include "envs/random.h"
#include "envs/render.h"

int main(int argc, char** argv) {
  std::string env_name = "LunarLander-v2", policy = "auto", out;
  std::uint64_t seed = 1;
  int max_steps = 0, every = 2;
  CLI::App app{
      "distrl-render: play one episode and write it as an animated GIF (600x400).\n"
      "Policies: heuristic (Gym's scripted lander or walker; LunarLander and BipedalWalker), random,\n"
      "noop; auto (the default): heuristic where there is one, random otherwise."};
  app.add_option("--env", env_name,
                 "environment (CartPole-v1, LunarLander-v2/-v3, LunarLanderContinuous-v2/-v3, BipedalWalker-v3, "
                 "BipedalWalkerHardcore-v3)");
  app.add_option("--policy", policy, "who acts")->check(CLI::IsMember({"auto", "heuristic", "random", "noop"}));
  app.add_option("--seed", seed, "episode seed");
  app.add_option("--max-steps", max_steps, "stop after this many steps (default: the env's time limit)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--every", every, "keep every N-th frame (the GIF plays in real time either way)")
      ->check(CLI::Range(1, 100));
  app.add_option("--out", out, "GIF file to write (default: runs/render/ENV-seedN.gif)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return distrl::guarded_main("distrl-render", [&] {
    using namespace distrl::envs;
    auto env = make_env(env_name);
    if (max_steps == 0) max_steps = env->max_episode_steps();
    const bool lander = env_name.rfind("LunarLander", 0) == 0, walker = env_name.rfind("BipedalWalker", 0) == 0;
    if (policy == "auto") policy = lander || walker ? "heuristic" : "random";
    if (out.empty()) out = "runs/render/" + env_name + "-seed" + std::to_string(seed) + ".gif";
    const auto dir = std::filesystem::path(out).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir) && !std::filesystem::create_directories(dir, ec) && ec)
      throw distrl::ConfigError("--out: cannot create " + dir.string() + ": " + ec.message());
    if (policy == "heuristic" && !lander && !walker)
      throw distrl::ConfigError(
          "--policy heuristic drives LunarLander and BipedalWalker only; use random or noop for " + env_name);
    BipedalWalkerHeuristic walk;
    const Space act = env->action_space();
    std::vector<float> obs(env->observation_space().dim()), a(act.dim());
    Rng rng(seed + 12345);
    env->reset(seed, obs.data());
    Frame frame;
    draw(*env, &frame);  // fails early for envs without a picture
    GifWriter gif(out, frame.width, frame.height, 2 * every);
    gif.add(frame);
    double ret = 0;
    int steps = 0;
    Step s;
    while (steps < max_steps) {
      if (act.kind == Space::Kind::Discrete) {
        const int action = policy == "heuristic" ? lunar_lander_heuristic(obs.data())
                           : policy == "random"  ? static_cast<int>(rng.uniform() * act.n)
                                                 : 0;
        s = env->step(action, obs.data());
      } else {
        if (policy == "heuristic" && walker) {
          const auto h = walk(obs.data());
          a.assign(h.begin(), h.end());
        } else if (policy == "heuristic") {
          const auto h = lunar_lander_heuristic_continuous(obs.data());
          a.assign(h.begin(), h.end());
        } else {
          for (int i = 0; i < act.dim(); ++i)
            a[i] = policy == "random" ? static_cast<float>(rng.uniform(act.low[i], act.high[i])) : 0.0f;
        }
        s = env->step(a.data(), obs.data());
      }
      ret += s.reward;
      ++steps;
      if (steps % every == 0 || s.done()) {
        draw(*env, &frame);
        gif.add(frame);
      }
      if (s.done()) break;
    }
    gif.close();
    std::printf("distrl-render: %s, %s policy, seed %llu: %d steps, return %.1f (%s); %d frames -> %s\n",
                env_name.c_str(), policy.c_str(), static_cast<unsigned long long>(seed), steps, ret,
                lander && s.terminated && s.reward == 100 ? "landed and came to rest"
                : s.terminated                            ? "terminated"
                : s.truncated                             ? "time limit"
                                                          : "stopped at --max-steps",
                gif.frames(), out.c_str());
    return 0;
  });
}
