#include "envs/detail/gymnasium_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
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

namespace distrl::envs::detail {
namespace {

// The child's side (the protocol is in the header). Lines come in on stdin, answers go out on
// the original stdout; anything else the env prints goes to stderr. Per batch, the loops below
// are the only Python that runs besides Gymnasium's own step: commands and actions are read as
// lists once, results written into numpy views of the shared buffer.
constexpr const char* kScript = R"PY(
import mmap, os, sys
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
envs, start, discrete, current = [], 0, True, None
def flat(values):
    return " ".join(repr(float(v)) for v in np.asarray(values, dtype=np.float64).ravel())
def view(buf, dtype, offset, shape):
    return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)
for line in sys.stdin.buffer:
    w = line.decode().split()
    if not w:
        continue
    try:
        if w[0] == "make":
            envs = [gymnasium.make(w[1]) for _ in range(int(w[2]))]
            o, a = envs[0].observation_space, envs[0].action_space
            if not isinstance(o, gymnasium.spaces.Box):
                raise TypeError(f"observation space {o}: only a Box is supported")
            spec = envs[0].spec
            steps = spec.max_episode_steps if spec and spec.max_episode_steps else 1000000
            threshold = spec.reward_threshold if spec and spec.reward_threshold is not None else float("inf")
            say("spec", steps, repr(float(threshold)))
            say("observation", int(np.prod(o.shape)), flat(o.low), flat(o.high))
            if isinstance(a, gymnasium.spaces.Discrete):
                start = int(a.start)
                say("action discrete", int(a.n))
            elif isinstance(a, gymnasium.spaces.Box) and len(a.shape) == 1:
                discrete = False
                say("action box", a.shape[0], flat(a.low), flat(a.high))
            else:
                raise TypeError(f"action space {a}: only Discrete and a 1-D Box are supported")
        elif w[0] == "map":
            size, offsets = int(w[1]), [int(v) for v in w[2:]]
            buf = mmap.mmap(3, size)
            n, od = len(envs), int(np.prod(envs[0].observation_space.shape))
            cmd = view(buf, np.uint8, offsets[0], (n,))
            seed = view(buf, np.uint64, offsets[1], (n,))
            act = view(buf, np.int32, offsets[2], (n,)) if discrete else \
                view(buf, np.float32, offsets[2], (n, envs[0].action_space.shape[0]))
            obs = view(buf, np.float32, offsets[3], (n, od))
            final = view(buf, np.float32, offsets[4], (n, od))
            reward = view(buf, np.float32, offsets[5], (n,))
            terminated = view(buf, np.uint8, offsets[6], (n,))
            truncated = view(buf, np.uint8, offsets[7], (n,))
            dtype = envs[0].action_space.dtype
            say("ok")
        elif w[0] == "reset":
            for i, c in enumerate(cmd.tolist()):
                if c:
                    current = i
                    o, _ = envs[i].reset(seed=int(seed[i]) if c == 2 else None)
                    obs[i] = np.ravel(o)
            current = None
            say("ok")
        elif w[0] == "step":
            actions = act.tolist()
            for i, c in enumerate(cmd.tolist()):
                if not c:
                    continue
                current = i
                env = envs[i]
                o, r, te, tr, _ = env.step(actions[i] + start if discrete else np.asarray(actions[i], dtype=dtype))
                reward[i], terminated[i], truncated[i] = r, bool(te), bool(tr)
                if c == 3 or (c == 2 and (te or tr)):
                    final[i] = np.ravel(o)
                    o, _ = env.reset()
                obs[i] = np.ravel(o)
            current = None
            say("ok")
        else:
            raise ValueError(f"unknown request {w[0]}")
    except Exception as e:
        where = f"env {current}: " if current is not None and len(envs) > 1 else ""
        current = None
        say("error", (where + type(e).__name__ + ": " + str(e)).replace("\n", " "))
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

// The most buffer a child gets: n envs' observations twice (the current and the final ones)
// and their actions. 64 CarRacing envs are ~14 MiB; 1 GiB is far past any observer's batch.
constexpr std::size_t kMaxBufferBytes = std::size_t{1} << 30;

std::size_t aligned(std::size_t v) { return (v + 63) & ~std::size_t{63}; }

// An fd at 4 or above, close-on-exec (the original closed): the spawn's dup2s onto 0, 1 and 3
// then never overwrite a source (a process started with stdin closed gets fds from 0).
int high_fd(int fd, const std::string& what) {
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 4);
  const int e = errno;
  ::close(fd);
  if (moved < 0) throw EnvError(what + ": " + std::strerror(e));
  return moved;
}

}  // namespace

GymnasiumChild::GymnasiumChild(const std::string& id, int n, double step_timeout_s, double make_timeout_s)
    : name_(kGymnasiumPrefix + id), id_(id), n_(n), step_timeout_s_(step_timeout_s) {
  if (id.empty() || id.find_first_of(" \t\n") != std::string::npos)
    throw EnvError("env.name '" + name_ +
                   "': give a Gymnasium ID after 'gymnasium:' (e.g. gymnasium:BipedalWalker-v3)");
  if (n < 1) throw EnvError(name_ + ": needs at least one env, got " + std::to_string(n));
  const char* env_python = std::getenv("DISTRL_GYMNASIUM_PYTHON");
  const std::string python = env_python && *env_python ? env_python : "python3";
  int rc = 0;
  try {
    rc = spawn(python);
  } catch (...) {
    stop_child();
    throw;
  }
  if (rc != 0) {
    stop_child();
    throw EnvError(name_ + ": cannot start " + python + ": " + std::strerror(rc) + "; " + no_gymnasium_fix());
  }
  try {
    make(n, make_timeout_s);
    map_buffer();
  } catch (...) {
    stop_child();
    throw;
  }
}

int GymnasiumChild::spawn(const std::string& python) {
  std::vector<std::string> args{python, "-u", "-W", "ignore", "-c", kScript};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int mem = ::memfd_create("distrl-gymnasium", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mem < 0) throw EnvError(name_ + ": memfd_create: " + std::strerror(errno));
  memfd_ = high_fd(mem, name_ + ": memfd");
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    throw EnvError(name_ + ": socketpair: " + std::strerror(errno));
  fd_ = fds[0];
  const int theirs = high_fd(fds[1], name_ + ": socket");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Its own process group: a rank's stop signal (distrl-launch signals the rank's group) or a
  // Ctrl-C must not kill it under the rank's graceful stop; it leaves when the socket closes.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  int rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  if (rc == 0) rc = posix_spawnattr_setpgroup(&attr, 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, theirs, 0);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, theirs, 1);
  if (rc == 0) rc = posix_spawn_file_actions_adddup2(&actions, memfd_, 3);
  pid_t pid = -1;
  if (rc == 0) rc = ::posix_spawnp(&pid, python.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(theirs);
  if (rc == 0) pid_ = pid;
  return rc;
}

GymnasiumChild::~GymnasiumChild() { stop_child(); }

void GymnasiumChild::make(int n, double make_timeout_s) {
  send("make " + id_ + " " + std::to_string(n));
  const auto spec = receive("spec", make_timeout_s);
  long steps = 0;
  if (spec.size() != 3 || !parse_int(spec[1], 1, 1 << 30, &steps) || !parse_float(spec[2], &threshold_))
    fail("a malformed answer to make");
  max_steps_ = static_cast<int>(steps);
  const auto refuse = [this](const std::string& what) { fail(what); };
  obs_space_ = box(receive("observation", step_timeout_s_), 1, kMaxObservationFloats, "observation space", refuse);
  if (obs_space_.low.empty()) fail("a malformed observation space");
  const auto act = receive("action", step_timeout_s_);
  long actions = 0;
  if (act.size() == 3 && act[1] == "discrete" && parse_int(act[2], 1, 1L << 40, &actions)) {
    if (actions > kMaxDiscreteActions)
      fail("a Discrete action space of " + act[2] + " actions, over the " + std::to_string(kMaxDiscreteActions) +
           " a policy here is built for");
    act_space_.kind = Space::Kind::Discrete;
    act_space_.n = static_cast<int>(actions);
  } else if (act.size() > 2 && act[1] == "box") {
    act_space_ = box(act, 2, kMaxBoxActions, "action space", refuse);
  }
  if (act_space_.dim() <= 0 || (act_space_.kind == Space::Kind::Discrete && act_space_.n <= 0))
    fail("a malformed action space");
}

void GymnasiumChild::map_buffer() {
  const auto n = static_cast<std::size_t>(n_);
  const auto obs_bytes = n * static_cast<std::size_t>(obs_space_.dim()) * sizeof(float);
  const auto act_bytes =
      n * (act_space_.kind == Space::Kind::Discrete ? sizeof(std::int32_t) : act_space_.dim() * sizeof(float));
  Layout& l = layout_;
  l.cmd = 0;
  l.seed = aligned(l.cmd + n);
  l.act = aligned(l.seed + n * sizeof(std::uint64_t));
  l.obs = aligned(l.act + act_bytes);
  l.final_obs = aligned(l.obs + obs_bytes);
  l.reward = aligned(l.final_obs + obs_bytes);
  l.terminated = aligned(l.reward + n * sizeof(float));
  l.truncated = aligned(l.terminated + n);
  l.size = aligned(l.truncated + n);
  if (l.size > kMaxBufferBytes)
    fail(std::to_string(n_) + " envs of " + std::to_string(obs_space_.dim()) + " observation floats need " +
         std::to_string(l.size >> 20) + " MiB of buffer, over the " + std::to_string(kMaxBufferBytes >> 20) +
         " MiB allowed: lower env.per_observer");
  // Sealed before it is mapped: the child cannot shrink it under our reads (SIGBUS) or grow it.
  // The size is read back after sealing, so a child that resized it before then is caught.
  struct stat st {};
  if (::ftruncate(memfd_, static_cast<off_t>(l.size)) != 0 ||
      ::fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 || ::fstat(memfd_, &st) != 0)
    fail("its shared buffer: " + std::string(std::strerror(errno)));
  if (static_cast<std::size_t>(st.st_size) != l.size) fail("its shared buffer was resized by the child");
  void* p = ::mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) fail("mapping its shared buffer: " + std::string(std::strerror(errno)));
  buffer_ = static_cast<unsigned char*>(p);
  run("map " + std::to_string(l.size) + " " + std::to_string(l.cmd) + " " + std::to_string(l.seed) + " " +
      std::to_string(l.act) + " " + std::to_string(l.obs) + " " + std::to_string(l.final_obs) + " " +
      std::to_string(l.reward) + " " + std::to_string(l.terminated) + " " + std::to_string(l.truncated));
}

std::string GymnasiumChild::which(int i) const { return n_ > 1 ? name_ + " (env " + std::to_string(i) + ")" : name_; }

void GymnasiumChild::run(const std::string& request) {
  send(request);
  if (receive("ok", step_timeout_s_).size() != 1) fail("a malformed answer to " + request.substr(0, request.find(' ')));
}

void GymnasiumChild::reset(const std::uint8_t* which, const std::optional<std::uint64_t>* seeds, float* obs) {
  auto* cmd = at(layout_.cmd);
  auto* seed = reinterpret_cast<std::uint64_t*>(at(layout_.seed));
  for (int i = 0; i < n_; ++i) {
    cmd[i] = which[i] ? (seeds[i] ? 2 : 1) : 0;
    seed[i] = seeds[i].value_or(0);
  }
  run("reset");
  const std::size_t dim = static_cast<std::size_t>(obs_space_.dim());
  const auto* from = reinterpret_cast<const float*>(at(layout_.obs));
  for (int i = 0; i < n_; ++i)
    if (which[i]) std::memcpy(obs + i * dim, from + i * dim, dim * sizeof(float));
}

void GymnasiumChild::check(const std::uint8_t* commands, const int* actions) const {
  if (act_space_.kind != Space::Kind::Discrete)
    throw EnvError(name_ + ": takes continuous actions (" + act_space_.describe() + "), not a discrete one");
  for (int i = 0; i < n_; ++i)
    if (commands[i] != kSkip && (actions[i] < 0 || actions[i] >= act_space_.n))
      throw EnvError(which(i) + ": action " + std::to_string(actions[i]) + " is out of range (" +
                     act_space_.describe() + ")");
}

void GymnasiumChild::check(const std::uint8_t* commands, const float* actions) const {
  if (act_space_.kind != Space::Kind::Box)
    throw EnvError(name_ + ": takes a discrete action (" + act_space_.describe() + "), not a vector");
  const std::size_t dim = static_cast<std::size_t>(act_space_.dim());
  for (int i = 0; i < n_; ++i) {
    if (commands[i] == kSkip) continue;
    for (std::size_t k = 0; k < dim; ++k)
      if (!std::isfinite(actions[i * dim + k]))
        throw EnvError(which(i) + ": action[" + std::to_string(k) + "] is " + std::to_string(actions[i * dim + k]) +
                       ", not finite");
  }
}

void GymnasiumChild::step(const std::uint8_t* commands, const int* actions, const Out& out) {
  static_assert(sizeof(int) == sizeof(std::int32_t), "the buffer holds discrete actions as int32");
  check(commands, actions);
  std::memcpy(at(layout_.act), actions, static_cast<std::size_t>(n_) * sizeof(std::int32_t));
  finish_step(commands, out);
}

void GymnasiumChild::step(const std::uint8_t* commands, const float* actions, const Out& out) {
  check(commands, actions);
  std::memcpy(at(layout_.act), actions, static_cast<std::size_t>(n_) * act_space_.dim() * sizeof(float));
  finish_step(commands, out);
}

void GymnasiumChild::finish_step(const std::uint8_t* commands, const Out& out) {
  std::memcpy(at(layout_.cmd), commands, static_cast<std::size_t>(n_));
  run("step");
  // Copied out first, then checked: the child could change the buffer under a check.
  const std::size_t dim = static_cast<std::size_t>(obs_space_.dim()), row = dim * sizeof(float);
  const auto* obs = reinterpret_cast<const float*>(at(layout_.obs));
  const auto* final_obs = reinterpret_cast<const float*>(at(layout_.final_obs));
  const auto* rewards = reinterpret_cast<const float*>(at(layout_.reward));
  for (int i = 0; i < n_; ++i) {
    const std::uint8_t c = commands[i];
    if (c == kSkip) continue;
    out.rewards[i] = rewards[i];
    const volatile std::uint8_t* flags = at(0);  // one read each: the child may write them meanwhile
    const std::uint8_t te = flags[layout_.terminated + i], tr = flags[layout_.truncated + i];
    if (te > 1 || tr > 1)
      fail("a malformed step answer: " + which(i) + "'s flags are terminated " + std::to_string(te) + ", truncated " +
           std::to_string(tr) + " (wanted 0 or 1)");
    out.terminated[i] = te;
    out.truncated[i] = tr;
    std::memcpy(out.obs + i * dim, obs + i * dim, row);
    if (c == kStepThenReset || (c == kStepThenResetIfDone && (te || tr)))
      std::memcpy(out.final_obs + i * dim, final_obs + i * dim, row);
  }
}

void GymnasiumChild::stop_child() {
  if (fd_ >= 0) ::close(fd_);  // the child reads EOF and leaves
  fd_ = -1;
  if (buffer_) ::munmap(buffer_, layout_.size);
  buffer_ = nullptr;
  if (memfd_ >= 0) ::close(memfd_);
  memfd_ = -1;
  if (pid_ <= 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid_, SIGKILL);  // its process group: whatever it started goes too
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
}

void GymnasiumChild::fail(const std::string& what, bool closed) {
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
  throw EnvError(name_ + ": " + why);
}

void GymnasiumChild::send(const std::string& line) {
  if (fd_ < 0) throw EnvError(name_ + ": its Python process is gone (an earlier error); make the env again");
  // Timed too: a child that stops reading while it answers would fill the socket's buffer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(step_timeout_s_);
  const std::string out = line + "\n";
  for (std::size_t done = 0; done < out.size();) {
    const ssize_t n = ::send(fd_, out.data() + done, out.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
      fail("lost its Python process (" + std::string(std::strerror(errno)) + ")", true);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) fail("Gymnasium read nothing for " + number(step_timeout_s_) + " s; killed it");
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) < 0 && errno != EINTR)
      fail("poll: " + std::string(std::strerror(errno)));
  }
}

std::vector<std::string> GymnasiumChild::receive(const std::string& expect, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::size_t end;
  while ((end = input_.find('\n')) == std::string::npos) {
    if (input_.size() > kMaxAnswerBytes) fail("an answer line over " + std::to_string(kMaxAnswerBytes >> 20) + " MiB");
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
    input_.append(chunk, static_cast<std::size_t>(n));
  }
  const std::string line = input_.substr(0, end);
  input_.erase(0, end + 1);
  // Counted before it is split: a 64 MiB line of one-letter words would be 32 M strings. The
  // longest answer is an observation space's: 2 bounds per value.
  std::size_t count = 0;
  for (std::size_t i = 0; i < line.size(); ++i)
    count += !std::isspace(static_cast<unsigned char>(line[i])) &&
             (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])));
  if (count > 2 * static_cast<std::size_t>(kMaxObservationFloats) + 3)
    fail("an answer of " + std::to_string(count) + " words (wanted " + expect + ")");
  auto words = split(line);
  if (!words.empty() && words[0] == "error") {
    const std::string message = line.size() > 6 ? line.substr(6) : "an error without a message";
    if (expect == "spec" && message.rfind("no gymnasium for ", 0) == 0)  // "no gymnasium for PYTHON: WHY"
      fail("the Python it runs has no gymnasium (" + message.substr(17) + "); " + no_gymnasium_fix(), true);
    if (expect == "spec") fail("Gymnasium cannot make '" + id_ + "': " + message);
    throw EnvError(name_ + ": Gymnasium says: " + message);
  }
  if (words.empty() || words[0] != expect)
    fail("an unexpected answer '" + line.substr(0, 80) + "' (wanted " + expect + ")");
  return words;
}

}  // namespace distrl::envs::detail
