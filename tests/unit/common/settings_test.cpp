// Settings: YAML + overrides onto typed fields, with errors that name the source and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/settings.h"
#include "tests/support/multiproc.h"

namespace distrl {
namespace {

struct Cfg {
  int n = 4;
  double lr = 0.01;
  bool learn = true;
  std::string mode = "batched";
  std::vector<int> hidden{128};
};

struct Bound {
  Cfg c;
  Settings s{"tool"};
  Bound() {
    s.bind("observers", &c.n, "observers").range(1, 64);
    s.bind("learner.lr", &c.lr, "lr").range(0, 1);
    s.bind("learner.learn", &c.learn, "learn");
    s.bind("agent.mode", &c.mode, "mode").choices({"batched", "unbatched"});
    s.bind("model.hidden", &c.hidden, "hidden").range(1, 4096);
  }
};

std::string write(const testing::TempDir& dir, const std::string& text) {
  std::string path = dir.path() + "/c.yaml";
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(SettingsTest, FileThenOverrides) {
  testing::TempDir dir;
  Bound b;
  b.s.load_file(write(dir, "observers: 8\nlearner:\n  lr: 0.5\n  learn: false\nmodel:\n  hidden: [64, 32]\n"));
  EXPECT_EQ(b.c.n, 8);
  EXPECT_EQ(b.c.lr, 0.5);
  EXPECT_FALSE(b.c.learn);
  EXPECT_EQ(b.c.hidden, (std::vector<int>{64, 32}));
  b.s.apply_overrides({"--agent.mode", "unbatched", "--observers=2", "model.hidden=[16]"});
  EXPECT_EQ(b.c.mode, "unbatched");
  EXPECT_EQ(b.c.n, 2);
  EXPECT_EQ(b.c.hidden, std::vector<int>{16});
  EXPECT_NE(b.s.to_yaml().find("unbatched"), std::string::npos);
  EXPECT_NE(b.s.describe().find("--agent.mode"), std::string::npos);
}

// Issue 43: the shell's words of what a user meant as one override are read as one; a value
// with '=' or a dashed value is never joined to its neighbour; another workload's run-length key
// suggests this one's.
TEST(SettingsTest, SpacedOverridesAreJoinedAndRunLengthKeysSuggestTheirNames) {
  EXPECT_EQ(Settings::joined({"learner.lr", "=", "0.5", "observers=", "3", "agent.mode", "=unbatched"}),
            (std::vector<std::string>{"learner.lr=0.5", "observers=3", "agent.mode=unbatched"}));
  EXPECT_EQ(Settings::joined({"--agent.mode", "unbatched", "run.out_dir=a=b", "x=", "--y"}),
            (std::vector<std::string>{"--agent.mode", "unbatched", "run.out_dir=a=b", "x=", "--y"}));
  Bound b;
  b.s.apply_overrides({"learner.lr", "=", "0.5"});
  EXPECT_EQ(b.c.lr, 0.5);
  int epochs = 1;
  Settings train("distrl-train");
  train.bind("train.epochs", &epochs, "epochs");
  EXPECT_NE(error_of([&] { train.apply_overrides({"learner.rounds=3"}); }).find("(did you mean train.epochs?)"),
            std::string::npos);
}

// Found by the settings fuzz target: to_yaml() wrote strings unquoted ("a: #1" came back as a
// map) and doubles to 6 digits, so the effective config written next to a run did not load
// back to the run's values.
TEST(SettingsTest, TheEffectiveConfigLoadsBackToTheSameValues) {
  Bound a, b;
  std::string name_a, name_b;
  a.s.bind("run.name", &name_a, "name");
  b.s.bind("run.name", &name_b, "name");
  a.s.load_text("run:\n  name: \"cart pole: #1\"\nlearner:\n  lr: 0.123456789012\nagent: {mode: unbatched}\n",
                "c.yaml");
  b.s.load_text(a.s.to_yaml(), "effective config");
  EXPECT_EQ(name_b, "cart pole: #1");
  EXPECT_EQ(b.c.lr, 0.123456789012);
  EXPECT_EQ(b.c.mode, "unbatched");
  EXPECT_EQ(b.s.to_yaml(), a.s.to_yaml());
  EXPECT_NE(a.s.to_yaml().find("lr: 0.123456789012\n"), std::string::npos) << a.s.to_yaml();
}

// Whatever the text, a config problem is a ConfigError (error_of lets any other exception fail
// the test): keys that are lists, alias cycles, deep nesting, control bytes, invalid UTF-8.
TEST(SettingsTest, StrangeYamlIsAConfigErrorNamingWhatIsWrong) {
  Bound b;
  std::string name;
  b.s.bind("run.name", &name, "name");
  EXPECT_NE(error_of([&] { b.s.load_text("? [a, b]\n: 1\n", "c.yaml"); }).find("a key must be a plain name"),
            std::string::npos);
  EXPECT_NE(error_of([&] { b.s.load_text(std::string(40, '[') + std::string(40, ']'), "c.yaml"); }), "no error");
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += std::string(2 * i, ' ') + "k" + std::to_string(i) + ":\n";
  EXPECT_NE(
      error_of([&] { b.s.load_text(deep + std::string(40, ' ') + "x: 1\n", "c.yaml"); }).find("nested more than 16"),
      std::string::npos);
  EXPECT_NE(error_of([&] { b.s.load_text("run:\n  name: \"a\\x01b\"\n", "c.yaml"); }).find("control character"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              b.s.load_text(
                  "run:\n  name: a\xff\xfe"
                  "b\n",
                  "c.yaml");
            }).find("not valid UTF-8"),
            std::string::npos);
  b.s.load_text("run:\n  name: caf\xc3\xa9 \xe2\x9c\x93\n", "c.yaml");  // UTF-8 text is fine
  EXPECT_EQ(name, "caf\xc3\xa9 \xe2\x9c\x93");
}

TEST(SettingsTest, ErrorsNameFileKeyAndWhatIsAllowed) {
  testing::TempDir dir;
  Bound b;
  const std::string path = write(dir, "learner:\n  lr: 0.5\n  lrr: 1\n");
  std::string e = error_of([&] { b.s.load_file(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  // Issue 35: the file's line and the nearest key, not a list of every key.
  EXPECT_NE(e.find(path + ":3: unknown key 'learner.lrr' (did you mean learner.lr?)"), std::string::npos) << e;
  EXPECT_EQ(e.find("learner.lr,"), std::string::npos) << e;
  e = error_of([&] { b.s.apply_overrides({"leaner.lr=1"}); });
  EXPECT_NE(e.find("(did you mean learner.lr?)"), std::string::npos) << e;
  e = error_of([&] { b.s.apply_overrides({"lr=1"}); });  // the right name in the wrong section
  EXPECT_NE(e.find("(did you mean learner.lr?)"), std::string::npos) << e;
  e = error_of([&] { b.s.apply_overrides({"zzzzzzzz=1"}); });
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  e = error_of([&] { b.s.load_file(write(dir, "\n# nothing\n")); });
  EXPECT_NE(e.find("holds no keys"), std::string::npos) << e;
  // A renamed key: the old name works (a line on stderr says the new one); both in one source
  // are refused; the command line may override the file's old name with the new one.
  Bound r;
  r.s.rename("learner.rate", "learner.lr");
  r.s.load_file(write(dir, "learner:\n  rate: 0.25\n"));
  EXPECT_DOUBLE_EQ(r.c.lr, 0.25);
  r.s.apply_overrides({"learner.lr=0.5"});
  EXPECT_DOUBLE_EQ(r.c.lr, 0.5);
  Bound both;
  both.s.rename("learner.rate", "learner.lr");
  e = error_of([&] { both.s.load_file(write(dir, "learner:\n  lr: 0.1\n  rate: 0.25\n")); });
  EXPECT_NE(e.find("learner.lr is given twice, once by its old name (learner.rate)"), std::string::npos) << e;

  e = error_of([&] { b.s.load_file(write(dir, "observers: many\n")); });
  EXPECT_NE(e.find("observers: 'many' is not an integer"), std::string::npos) << e;
  e = error_of([&] { b.s.load_file(write(dir, "observers: 100\n")); });
  EXPECT_NE(e.find("out of range [1, 64]"), std::string::npos) << e;
  e = error_of([&] { b.s.apply_overrides({"--agent.mode=fast"}); });
  EXPECT_NE(e.find("command line: agent.mode: 'fast' is not one of: batched, unbatched"), std::string::npos) << e;
  e = error_of([&] { b.s.apply_overrides({"--learner.learn=maybe"}); });
  EXPECT_NE(e.find("not a boolean"), std::string::npos) << e;
  e = error_of([&] { b.s.apply_overrides({"--bogus"}); });
  EXPECT_NE(e.find("'--bogus' is not a known option"), std::string::npos) << e;
  e = error_of([&] { b.s.load_file(write(dir, "observers: [1\n")); });
  EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
  e = error_of([&] { b.s.load_file(dir.path() + "/missing.yaml"); });
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

// Hostile-user friction (issue 14, item 8): a flag without its value says so; whole-number
// bounds print as integers; an empty, file-shaped or unwritable output directory is refused
// when the configuration is checked, before any process starts.
TEST(SettingsTest, MissingValuesRangesAndOutputDirectoriesAreExplained) {
  testing::TempDir dir;
  Bound b;
  std::string e = error_of([&] { b.s.apply_overrides({"--learner.lr"}); });
  EXPECT_NE(e.find("'--learner.lr' needs a value (--learner.lr VALUE or learner.lr=VALUE)"), std::string::npos) << e;

  long long big = 5;
  Settings s("tool");
  s.bind("run.steps", &big, "steps").range(1, 1e8);
  e = error_of([&] { s.apply_overrides({"run.steps=0"}); });
  EXPECT_NE(e.find("out of range [1, 100000000]"), std::string::npos) << e;

  std::string out = dir.path() + "/runs/a";
  s.bind("run.out_dir", &out, "outputs").output_dir();
  s.check();  // does not exist yet, but its parent is writable
  EXPECT_FALSE(std::filesystem::exists(out)) << "check() created it";
  s.apply_overrides({"run.out_dir="});
  e = error_of([&] { s.check(); });
  EXPECT_NE(e.find("command line: run.out_dir is empty"), std::string::npos) << e;
  std::ofstream(dir.path() + "/file") << "x";
  s.apply_overrides({"run.out_dir=" + dir.path() + "/file"});
  e = error_of([&] { s.check(); });
  EXPECT_NE(e.find("is a file, not a directory"), std::string::npos) << e;
  s.apply_overrides({"run.out_dir=" + dir.path() + "/file/sub"});
  e = error_of([&] { s.check(); });
  EXPECT_NE(e.find("cannot be created"), std::string::npos) << e;
  // (An unwritable parent is refused with "cannot be written"; not testable as root, who may
  // write anywhere that is mounted read-write.)
}

}  // namespace
}  // namespace distrl
