#include "envs/gymnasium_env.h"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include "common/error.h"

extern char** environ;

namespace distrl::envs {
namespace {

// The child's side: one request per line on stdin, one answer line on stdout.
//   make ID      -> "spec MAX_STEPS THRESHOLD", "observation DIM LOW... HIGH...",
//                   "action discrete N" or "action box DIM LOW... HIGH..."
//   reset SEED|- -> "obs O..."
//   step A...    -> "step REWARD TERMINATED TRUNCATED O..."
// Any exception -> "error TYPE: MESSAGE"; no gymnasium -> "error ..." and exit 3.
constexpr const char* kScript = R"PY(
import os, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]  # -c puts the working directory first: a local numpy.py must not shadow numpy
proto = os.fdopen(os.dup(1), "w")  # answers only; anything else printed goes to stderr
os.dup2(2, 1)
def say(*words):
    print(*words, file=proto, flush=True)
try:
    import gymnasium
    import numpy as np
except ImportError as e:
    say("error", "no gymnasium for", sys.executable + ":", str(e))
    sys.exit(3)
env, start = None, 0
def flat(values):
    return " ".join(repr(float(v)) for v in np.asarray(values, dtype=np.float64).ravel())
for line in sys.stdin:
    w = line.split()
    if not w:
        continue
    try:
        if w[0] == "make":
            env = gymnasium.make(w[1])
            o, a = env.observation_space, env.action_space
            if not isinstance(o, gymnasium.spaces.Box):
                raise TypeError(f"observation space {o}: only a Box is supported")
            spec = env.spec
            steps = spec.max_episode_steps if spec and spec.max_episode_steps else 1000000
            threshold = spec.reward_threshold if spec and spec.reward_threshold is not None else float("inf")
            say("spec", steps, repr(float(threshold)))
            say("observation", int(np.prod(o.shape)), flat(o.low), flat(o.high))
            if isinstance(a, gymnasium.spaces.Discrete):
                start = int(a.start)
                say("action discrete", int(a.n))
            elif isinstance(a, gymnasium.spaces.Box) and len(a.shape) == 1:
                say("action box", a.shape[0], flat(a.low), flat(a.high))
            else:
                raise TypeError(f"action space {a}: only Discrete and a 1-D Box are supported")
        elif w[0] == "reset":
            obs, _ = env.reset(seed=None if w[1] == "-" else int(w[1]))
            say("obs", flat(obs))
        elif w[0] == "step":
            if isinstance(env.action_space, gymnasium.spaces.Discrete):
                action = int(w[1]) + start
            else:
                action = np.array([float(v) for v in w[1:]], dtype=env.action_space.dtype)
            obs, reward, terminated, truncated, _ = env.step(action)
            say("step", repr(float(reward)), int(bool(terminated)), int(bool(truncated)), flat(obs))
        else:
            raise ValueError(f"unknown request {w[0]}")
    except Exception as e:
        say("error", (type(e).__name__ + ": " + str(e)).replace("\n", " "))
)PY";

std::vector<std::string> split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Answers are untrusted text: a word must be a whole number (strtof reading all of it; "inf"
// and "nan" are numbers), and a line at most kMaxAnswerBytes long (CarRacing's 27,648 floats
// are ~600 KB).
constexpr std::size_t kMaxAnswerBytes = 64u << 20;

bool parse_float(const std::string& s, float* v) {
  char* end = nullptr;
  *v = std::strtof(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

bool parse_int(const std::string& s, long lo, long hi, long* v) {
  char* end = nullptr;
  errno = 0;
  *v = std::strtol(s.c_str(), &end, 10);
  return !s.empty() && end == s.c_str() + s.size() && errno == 0 && *v >= lo && *v <= hi;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// What a child may announce: sizes the policy and its batches can hold (an observation of 2^24
// floats is 64 MiB per env step; a Discrete space of 2^30 actions an output layer of 2^30 rows).
// Atari's 210x160x3 frames are 100,800 floats, CarRacing's 27,648.
constexpr long kMaxObservationFloats = 1L << 20;
constexpr long kMaxDiscreteActions = 1L << 16;
constexpr long kMaxBoxActions = 1L << 12;

// "DIM LOW... HIGH..." from words[at]; empty bounds when malformed. A dimension over max_dim is
// refused naming the limit (what: "observation space", "action space").
Space box(const std::vector<std::string>& w, std::size_t at, long max_dim, const std::string& what,
          const std::function<void(const std::string&)>& fail) {
  Space s;
  s.kind = Space::Kind::Box;
  long dim = 0;
  if (at < w.size() && parse_int(w[at], 1, 1L << 40, &dim) && dim > max_dim)
    fail("an " + what + " of " + w[at] + " values, over the " + std::to_string(max_dim) +
         " a policy here is built for");
  if (at >= w.size() || !parse_int(w[at], 1, max_dim, &dim) || w.size() != at + 1 + 2 * static_cast<std::size_t>(dim))
    return s;
  std::vector<float> low(dim), high(dim);
  for (long i = 0; i < dim; ++i)
    if (!parse_float(w[at + 1 + i], &low[i]) || !parse_float(w[at + 1 + dim + i], &high[i])) return s;
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

// What to do about a Python without gymnasium: the variable that picks another, and the venv
// `make test` builds with Gymnasium and Box2D in it (named as ready when it is there).
std::string no_gymnasium_fix() {
  const char* home = std::getenv("HOME");
  const std::string venv = std::string(home && *home ? home : "~") + "/.cache/distrl/reference-venv/bin/python";
  const bool there = ::access(venv.c_str(), X_OK) == 0;
  return "set DISTRL_GYMNASIUM_PYTHON to a Python that has it: " +
         (there ? "the reference venv `make test` built is ready, DISTRL_GYMNASIUM_PYTHON=" + venv
                : "`make reference-venv` builds one with Gymnasium and Box2D (" + venv + ")") +
         ", or pip install 'gymnasium[box2d]' into yours";
}

}  // namespace

GymnasiumEnv::GymnasiumEnv(const std::string& id, double step_timeout_s, double make_timeout_s)
    : name_(kGymnasiumPrefix + id), id_(id), step_timeout_s_(step_timeout_s) {
  if (id.empty() || id.find_first_of(" \t\n") != std::string::npos)
    throw EnvError("env.name '" + name_ +
                   "': give a Gymnasium ID after 'gymnasium:' (e.g. gymnasium:BipedalWalker-v3)");
  const char* env_python = std::getenv("DISTRL_GYMNASIUM_PYTHON");
  const std::string python = env_python && *env_python ? env_python : "python3";
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    throw EnvError(name_ + ": socketpair: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Its own process group: a rank's stop signal (distrl-launch signals the rank's group) or a
  // Ctrl-C must not kill it under the rank's graceful stop; it leaves when the socket closes.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  std::vector<std::string> args{python, "-u", "-W", "ignore", "-c", kScript};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ::posix_spawnp(&pid_, python.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  fd_ = fds[0];
  if (rc != 0) {
    ::close(fd_);
    fd_ = -1;
    pid_ = -1;
    throw EnvError(name_ + ": cannot start " + python + ": " + std::strerror(rc) + "; " + no_gymnasium_fix());
  }
  try {
    send("make " + id_);
    const auto spec = receive("spec", make_timeout_s);
    long steps = 0;
    if (spec.size() != 3 || !parse_int(spec[1], 1, 1 << 30, &steps) || !parse_float(spec[2], &threshold_))
      fail("a malformed answer to make");
    max_steps_ = static_cast<int>(steps);
    const auto refuse = [this](const std::string& what) { fail(what); };
    obs_space_ = box(receive("observation", step_timeout_s_), 1, kMaxObservationFloats, "observation space", refuse);
    if (obs_space_.low.empty()) fail("a malformed observation space");
    const auto act = receive("action", step_timeout_s_);
    long n = 0;
    if (act.size() == 3 && act[1] == "discrete" && parse_int(act[2], 1, 1L << 40, &n)) {
      if (n > kMaxDiscreteActions)
        fail("a Discrete action space of " + act[2] + " actions, over the " + std::to_string(kMaxDiscreteActions) +
             " a policy here is built for");
      act_space_.kind = Space::Kind::Discrete;
      act_space_.n = static_cast<int>(n);
    } else if (act.size() > 2 && act[1] == "box") {
      act_space_ = box(act, 2, kMaxBoxActions, "action space", refuse);
    }
    if (act_space_.dim() <= 0 || (act_space_.kind == Space::Kind::Discrete && act_space_.n <= 0))
      fail("a malformed action space");
  } catch (...) {
    stop_child();
    throw;
  }
}

GymnasiumEnv::~GymnasiumEnv() { stop_child(); }

void GymnasiumEnv::stop_child() {
  if (fd_ >= 0) ::close(fd_);  // the child reads EOF and leaves
  fd_ = -1;
  if (pid_ <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

void GymnasiumEnv::fail(const std::string& what, bool closed) {
  std::string why = what;
  // A child that closed its end may not be reapable yet: give it a moment, so that its exit
  // status (no gymnasium: 3) can be named.
  for (int i = 0; closed && i < 100 && pid_ > 0; ++i) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int status = 0;
  if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
      why += ": the Python here has no gymnasium; " + no_gymnasium_fix();
    else
      why += WIFEXITED(status) ? ": its Python process exited with status " + std::to_string(WEXITSTATUS(status))
                               : ": its Python process was killed by signal " + std::to_string(WTERMSIG(status));
    why += " (Python's own message, if any, is on stderr above)";
  }
  stop_child();
  done_ = true;
  throw EnvError(name_ + ": " + why);
}

void GymnasiumEnv::send(const std::string& line) {
  if (fd_ < 0) throw EnvError(name_ + ": its Python process is gone (an earlier error); make the env again");
  const std::string out = line + "\n";
  for (std::size_t at = 0; at < out.size();) {
    const ssize_t n = ::send(fd_, out.data() + at, out.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("lost its Python process (" + std::string(std::strerror(errno)) + ")", true);
    at += static_cast<std::size_t>(n);
  }
}

std::vector<std::string> GymnasiumEnv::receive(const std::string& expect, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::size_t end;
  while ((end = buffer_.find('\n')) == std::string::npos) {
    if (buffer_.size() > kMaxAnswerBytes) fail("an answer line over " + std::to_string(kMaxAnswerBytes >> 20) + " MiB");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) fail("Gymnasium answered nothing for " + number(timeout_s) + " s; killed it");
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (r < 0 && errno != EINTR) fail("poll: " + std::string(std::strerror(errno)));
    if (r <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("its Python process closed the connection", true);
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
  const std::string line = buffer_.substr(0, end);
  buffer_.erase(0, end + 1);
  auto words = split(line);
  if (!words.empty() && words[0] == "error") {
    const std::string message = line.size() > 6 ? line.substr(6) : "an error without a message";
    if (expect == "spec" && message.rfind("no gymnasium for ", 0) == 0)  // "no gymnasium for PYTHON: WHY"
      fail("the Python it runs has no gymnasium (" + message.substr(17) + "); " + no_gymnasium_fix(), true);
    if (expect == "spec") fail("Gymnasium cannot make '" + id_ + "': " + message);
    done_ = true;  // the episode's state is Gymnasium's to say; start again with reset()
    throw EnvError(name_ + ": Gymnasium says: " + message);
  }
  if (words.empty() || words[0] != expect)
    fail("an unexpected answer '" + line.substr(0, 80) + "' (wanted " + expect + ")");
  return words;
}

void GymnasiumEnv::read_obs(const std::vector<std::string>& w, std::size_t from, float* obs) {
  const std::size_t dim = static_cast<std::size_t>(obs_space_.dim());
  if (w.size() != from + dim)
    fail("Gymnasium gave " + std::to_string(w.size() - std::min(w.size(), from)) +
         " observation values, its space has " + std::to_string(dim));
  for (std::size_t i = 0; i < dim; ++i)
    if (!parse_float(w[from + i], &obs[i])) fail("observation value '" + w[from + i].substr(0, 40) + "' is no number");
}

void GymnasiumEnv::reset(float* obs) {
  send("reset " + (pending_seed_ ? std::to_string(*pending_seed_) : std::string("-")));
  read_obs(receive("obs", step_timeout_s_), 1, obs);
  pending_seed_.reset();  // used: later resets go on from Gymnasium's generator
  done_ = false;
}

Step GymnasiumEnv::finish_step(const std::vector<std::string>& w, float* obs) {
  const auto flag = [](const std::string& v) { return v == "0" || v == "1"; };
  Step s;
  if (w.size() < 4 || !parse_float(w[1], &s.reward) || !flag(w[2]) || !flag(w[3]))
    fail("a malformed step answer (wanted: step REWARD 0|1 0|1 OBSERVATION...)");
  read_obs(w, 4, obs);
  s.terminated = w[2] == "1";
  s.truncated = w[3] == "1" && !s.terminated;  // terminated wins, as in the native envs
  done_ = s.done();
  return s;
}

Step GymnasiumEnv::step(int action, float* obs) {
  if (act_space_.kind != Space::Kind::Discrete) return Env::step(action, obs);
  if (done_) throw EnvError(name_ + ": step() after the episode ended; call reset()");
  if (action < 0 || action >= act_space_.n)
    throw EnvError(name_ + ": action " + std::to_string(action) + " is out of range (" + act_space_.describe() + ")");
  send("step " + std::to_string(action));
  return finish_step(receive("step", step_timeout_s_), obs);
}

Step GymnasiumEnv::step(const float* action, float* obs) {
  if (act_space_.kind != Space::Kind::Box) return Env::step(action, obs);
  if (done_) throw EnvError(name_ + ": step() after the episode ended; call reset()");
  std::string line = "step";
  for (int i = 0; i < act_space_.dim(); ++i) {
    if (!std::isfinite(action[i]))
      throw EnvError(name_ + ": action[" + std::to_string(i) + "] is " + std::to_string(action[i]) + ", not finite");
    line += " " + number(action[i]);
  }
  send(line);
  return finish_step(receive("step", step_timeout_s_), obs);
}

}  // namespace distrl::envs
