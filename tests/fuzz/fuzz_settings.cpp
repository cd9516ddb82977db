// The config loader as distrl-launch and every tool meet a user's file: YAML text plus
// command-line overrides onto bound fields of every kind. Anything wrong must be a
// ConfigError; whatever loads must survive describe() and round-trip through to_yaml() (the
// effective config written next to a run's outputs is loaded again by --resume and by users).
#include "common/error.h"
#include "common/settings.h"
#include "tests/fuzz/fuzz_input.h"

namespace distrl::fuzz {
namespace {

struct Fields {
  int steps = 100;
  long long seed = 1;
  double lr = 0.01;
  bool render = false;
  std::string mode = "batched", name = "run", out_dir = "runs/x";
  std::vector<int> sizes{8, 20};
  std::string transport = "tcp";

  void bind(Settings& s) {
    s.bind("train.steps", &steps, "steps").range(1, 1e8);
    s.bind("run.seed", &seed, "seed");
    s.bind("learner.lr", &lr, "learning rate").range(0, 10);
    s.bind("env.render", &render, "render");
    s.bind("agent.mode", &mode, "mode").choices({"batched", "unbatched"});
    s.bind("run.name", &name, "name");
    s.bind("run.out_dir", &out_dir, "outputs");
    s.bind("pipeline.microbatch_size", &sizes, "sizes").range(1, 4096);
    s.bind("run.transport", &transport, "transport").choices({"tcp", "ipc"});
  }
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= text.size() && out.size() < 32) {
    const auto nl = text.find('\n', at);
    out.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return out;
}

}  // namespace

int fuzz_settings(const std::uint8_t* data, std::size_t size) {
  quiet_logs();
  auto parts = split_frames(data, size, 2);
  if (parts.empty()) return 0;
  Fields f;
  Settings s("distrl-fuzz");
  f.bind(s);
  std::string yaml;
  try {
    s.load_text(parts[0], "fuzz.yaml");
    if (parts.size() > 1) s.apply_overrides(lines(parts[1]));
    (void)s.describe();
    yaml = s.to_yaml();
  } catch (const ConfigError&) {
    return 0;
  }
  // What was written must load again to the same configuration.
  Fields g;
  Settings t("distrl-fuzz");
  g.bind(t);
  try {
    t.load_text(yaml, "effective config");
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "to_yaml() wrote a config that does not load: %s\n---\n%s---\n", e.what(), yaml.c_str());
    FUZZ_CHECK(false);
  }
  FUZZ_CHECK(t.to_yaml() == yaml);
  FUZZ_CHECK(g.steps == f.steps && g.seed == f.seed && g.render == f.render && g.mode == f.mode && g.name == f.name &&
             g.out_dir == f.out_dir && g.sizes == f.sizes && g.transport == f.transport);
  FUZZ_CHECK(g.lr == f.lr);
  return 0;
}

std::vector<std::string> seeds_settings() {
  return {
      join_frames({"train:\n  steps: 500\nlearner:\n  lr: 3e-4\nagent:\n  mode: unbatched\n"}),
      join_frames({"run:\n  name: \"cart pole: #1\"\n  out_dir: runs/cartpole\n  seed: -7\nenv: {render: true}\n",
                   "--train.steps=20\nlearner.lr=0.5\n--agent.mode\nbatched"}),
      join_frames({"pipeline:\n  microbatch_size: [8, 12, 20]\nrun:\n  transport: ipc\n"}),
      join_frames({"# only a comment\n", "--pipeline.microbatch_size=[4,5]"}),
      join_frames({"a: &x {b: 1}\nc: *x\n"}),
  };
}

}  // namespace distrl::fuzz

DISTRL_FUZZ_ENTRY(distrl::fuzz::fuzz_settings)
