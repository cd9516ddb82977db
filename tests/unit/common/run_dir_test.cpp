// A run's output directory holds one run (common/run_dir.h, common/run_lock.h): a fresh run into
// another run's outputs is refused naming them, --force moves them aside, a resume checks the
// checkpoint's run and workload, and a resumed CSV drops the rows its checkpoint does not hold.
#include "common/run_dir.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"
#include "common/output_file.h"
#include "common/run_lock.h"
#include "tests/support/multiproc.h"

namespace {

using distrl::testing::TempDir;
namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void touch(const std::string& path, const std::string& text = "x") { std::ofstream(path) << text; }

// Runs f and returns the ConfigError's message ("" when none was thrown).
template <typename F>
std::string refusal(F f) {
  try {
    f();
  } catch (const distrl::ConfigError& e) {
    return e.what();
  }
  return "";
}

struct ThisRunReset {  // each test starts as a fresh process of the rl workload would
  ThisRunReset() {
    distrl::this_run() = distrl::ThisRun{};
    distrl::this_run().workload = "rl";
    ::unsetenv("DISTRL_RUN_LOCK_FORCE");
  }
  ~ThisRunReset() {
    distrl::this_run() = distrl::ThisRun{};
    ::unsetenv("DISTRL_RUN_LOCK_FORCE");
  }
};

TEST(RunDirTest, OnlyTheToolsOutputsCount) {
  TempDir dir;
  touch(dir.file("notes.txt"));
  touch(dir.file(".distrl-run.lock"));
  fs::create_directories(dir.file("previous/2026"));
  EXPECT_TRUE(distrl::run_outputs(dir.path()).empty());
  touch(dir.file("metrics.csv"));
  touch(dir.file("events.out.tfevents.1.host.2.0"));
  EXPECT_EQ(distrl::run_outputs(dir.path()),
            (std::vector<std::string>{"events.out.tfevents.1.host.2.0", "metrics.csv"}));
}

TEST(RunDirTest, AFreshRunIntoAFinishedRunsOutputsIsRefusedNamingThemAndTheWaysOn) {
  ThisRunReset reset;
  TempDir dir;
  { distrl::RunLock first(dir.path()); }  // a finished run: identity written, claim over
  touch(dir.file("metrics.csv"));
  touch(dir.file("policy.pt"));
  touch(dir.file("events.out.tfevents.1.host.2.0"));
  const std::string first_id = distrl::read_run_identity(dir.path())->run;
  const std::string why = refusal([&] { distrl::RunLock second(dir.path()); });
  EXPECT_NE(why.find("holds another run's outputs (metrics.csv, policy.pt and 1 TensorBoard event file; run " +
                     first_id + " of rl"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("run.out_dir=" + dir.path() + "-2"), std::string::npos) << why;
  EXPECT_NE(why.find("run.out_dir=" + dir.path() + " --resume " + dir.file("policy.pt")), std::string::npos) << why;
  EXPECT_NE(why.find("--force"), std::string::npos) << why;
  EXPECT_EQ(read(dir.file("metrics.csv")), "x") << "nothing was touched";
  EXPECT_EQ(distrl::read_run_identity(dir.path())->run, first_id);
  EXPECT_EQ(refusal([&] { distrl::check_fresh(dir.path(), false); }), why) << "--check-config says the same";
}

TEST(RunDirTest, ForceMovesTheOutputsAsideAndTheUsersFilesStay) {
  ThisRunReset reset;
  TempDir dir;
  { distrl::RunLock first(dir.path()); }
  const auto first = *distrl::read_run_identity(dir.path());
  touch(dir.file("metrics.csv"), "old rows");
  touch(dir.file("events.out.tfevents.1.host.2.0"));
  touch(dir.file("notes.txt"), "mine");
  ::setenv("DISTRL_RUN_LOCK_FORCE", "1", 1);
  {
    distrl::RunLock second(dir.path());
    const auto now = distrl::read_run_identity(dir.path());
    ASSERT_TRUE(now);
    EXPECT_NE(now->run, first.run);
    EXPECT_EQ(distrl::this_run().run, now->run);
  }
  std::string stamp = first.started;
  std::replace(stamp.begin(), stamp.end(), ':', '-');
  const std::string aside = dir.file("previous/" + stamp);
  EXPECT_EQ(read(aside + "/metrics.csv"), "old rows");
  EXPECT_TRUE(fs::exists(aside + "/events.out.tfevents.1.host.2.0"));
  EXPECT_EQ(distrl::read_run_identity(aside)->run, first.run);
  EXPECT_FALSE(fs::exists(dir.file("metrics.csv")));
  EXPECT_EQ(read(dir.file("notes.txt")), "mine");
}

TEST(RunDirTest, AResumeChecksTheCheckpointsRunAndWorkload) {
  ThisRunReset reset;
  TempDir dir, empty;
  { distrl::RunLock first(dir.path()); }
  touch(dir.file("metrics.csv"));
  const std::string id = distrl::read_run_identity(dir.path())->run;
  EXPECT_EQ(refusal([&] { distrl::check_resume(dir.path(), "ck.pt", id, "rl"); }), "");
  EXPECT_EQ(refusal([&] { distrl::check_resume(dir.path(), "ck.pt", "", ""); }), "") << "from before ids";
  const std::string other = refusal([&] { distrl::check_resume(dir.path(), "elsewhere/ck.pt", "0123456789ab", "rl"); });
  EXPECT_NE(
      other.find("belongs to run 0123456789ab, but run.out_dir '" + dir.path() + "' holds the outputs of run " + id),
      std::string::npos)
      << other;
  EXPECT_NE(other.find("run.out_dir=elsewhere"), std::string::npos) << other;
  const std::string kind = refusal([&] { distrl::check_resume(dir.path(), "ck.pt", id, "ddp"); });
  EXPECT_NE(kind.find("written by a run of workload ddp, and this run is rl"), std::string::npos) << kind;
  // Into a new directory: it takes the checkpoint's run id when claimed.
  distrl::this_run().resume = true;
  distrl::check_resume(empty.path(), "ck.pt", id, "rl");
  { distrl::RunLock claim(empty.path()); }
  EXPECT_EQ(distrl::read_run_identity(empty.path())->run, id);
}

// Issue 45, item 8: the lock file was opened following links, so a link planted at
// OUT_DIR/.distrl-run.lock made the run truncate and write the file it points to. A link, a FIFO
// and (as root) another user's file are refused, naming the path; the link's target is untouched.
TEST(RunDirTest, ALockFileThatIsALinkAFifoOrAnotherUsersIsRefused) {
  ThisRunReset reset;
  TempDir dir, elsewhere;
  const std::string target = elsewhere.file("precious.txt");
  touch(target, "keep me");
  fs::create_symlink(target, dir.file(".distrl-run.lock"));
  const auto output_error = [](auto f) -> std::string {
    try {
      f();
    } catch (const distrl::OutputError& e) {
      return e.what();
    }
    return "";
  };
  std::string why = output_error([&] { distrl::RunLock claim(dir.path()); });
  EXPECT_NE(why.find("is a symbolic link"), std::string::npos) << why;
  EXPECT_NE(why.find(dir.file(".distrl-run.lock")), std::string::npos) << why;
  why = output_error([&] { distrl::RunLock::refuse_if_claimed(dir.path()); });
  EXPECT_NE(why.find("is a symbolic link"), std::string::npos) << why;
  EXPECT_EQ(read(target), "keep me");

  TempDir fifo_dir;
  ASSERT_EQ(::mkfifo(fifo_dir.file(".distrl-run.lock").c_str(), 0600), 0);
  why = output_error([&] { distrl::RunLock claim(fifo_dir.path()); });
  EXPECT_NE(why.find("is not a regular file"), std::string::npos) << why;

  if (::geteuid() == 0) {  // only root can make a file another user's
    TempDir theirs;
    touch(theirs.file(".distrl-run.lock"), "");
    ASSERT_EQ(::chown(theirs.file(".distrl-run.lock").c_str(), 65534, 65534), 0);
    why = output_error([&] { distrl::RunLock claim(theirs.path()); });
    EXPECT_NE(why.find("belongs to uid 65534"), std::string::npos) << why;
  }
  // A regular file of ours (an earlier run's) is the lock, as before.
  TempDir ours;
  touch(ours.file(".distrl-run.lock"), "pid=1 host=h tool=t since=s\n");
  EXPECT_NO_THROW({ distrl::RunLock claim(ours.path()); });
}

TEST(CsvFileTest, AResumeDropsTheRowsPastItsCheckpointAndRefusesAnotherHeader) {
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  {
    distrl::CsvFile f(path, "round,loss");
    for (int r = 1; r <= 8; ++r) f.row(r, r * 0.5);
  }
  {
    distrl::CsvFile f(path, "round,loss", /*resumed_at=*/5);
    f.row(6, 99);
  }
  EXPECT_EQ(read(path), "round,loss\n1,0.5\n2,1\n3,1.5\n4,2\n5,2.5\n6,99\n");
  const std::string why = refusal([&] { distrl::CsvFile f(path, "epoch,train_loss", 2); });
  EXPECT_NE(why.find("has the columns round,loss, and this run writes epoch,train_loss"), std::string::npos) << why;
  { distrl::CsvFile fresh(path, "epoch,train_loss"); }
  EXPECT_EQ(read(path), "epoch,train_loss\n");
  // A row cut by a kill (no newline) goes, whatever it starts with; an empty file is a new one.
  touch(path, "round,loss\n1,0.5\n2,1\n3");
  { distrl::CsvFile f(path, "round,loss", 5); }
  EXPECT_EQ(read(path), "round,loss\n1,0.5\n2,1\n");
  touch(path, "");
  { distrl::CsvFile f(path, "round,loss", 5); }
  EXPECT_EQ(read(path), "round,loss\n");
}

}  // namespace
