#include "tools/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "transport/bootstrap/rendezvous.h"
#include "transport/bootstrap/security.h"
#include "transport/bootstrap/store.h"

namespace distrl::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  int global = 0;
  pid_t pid = -1;
  int out_fd = -1;
  std::string partial;  // an unfinished output line
  bool exited = false;
  int code = 0;
  int restarts = 0;
};

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_signals = 0;  // how many: the second one kills the ranks at once
void on_signal(int sig) {
  g_signal = sig;
  g_signals = g_signals + 1;
}

void emit(const Rank& r, const std::string& line, bool prefix) {
  std::string s = prefix ? "[" + std::to_string(r.global) + "] " + line + "\n" : line + "\n";
  (void)!::write(STDOUT_FILENO, s.data(), s.size());
}

pid_t spawn(const LaunchOptions& o, int local, int global, int world, int port, int restarts, int* out_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("pipe failed: " + std::string(std::strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) throw Error("fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so stopping a rank stops what it started
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    auto set = [](const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); };
    set("RANK", std::to_string(global));
    set("WORLD_SIZE", std::to_string(world));
    set("LOCAL_RANK", std::to_string(local));
    set("LOCAL_WORLD_SIZE", std::to_string(o.nproc));
    set("GROUP_RANK", std::to_string(o.node_rank));
    set("MASTER_ADDR", o.master_addr);
    set("MASTER_PORT", std::to_string(port));
    set("DISTRL_STORE_HOSTED", "1");                        // node 0's launcher serves the store
    set("DISTRL_RESTART_COUNT", std::to_string(restarts));  // as torchrun's TORCHELASTIC_RESTART_COUNT
    const auto own = o.rank_commands.find(global);
    const auto& cmd = own != o.rank_commands.end() ? own->second : o.command;
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::string msg = "distrl-launch: cannot run '" + cmd[0] + "': " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, msg.data(), msg.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(fds[1]);
  *out_fd = fds[0];
  return pid;
}

// Reads what a rank wrote and prints whole lines; false at end of file.
bool pump(Rank& r, bool prefix) {
  char buf[65536];
  ssize_t n = ::read(r.out_fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!r.partial.empty()) emit(r, r.partial, prefix);
    r.partial.clear();
    return false;
  }
  r.partial.append(buf, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = r.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(r, r.partial.substr(start, nl - start), prefix);
  r.partial.erase(0, start);
  return true;
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int free_port(const std::string& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  ::inet_pton(AF_INET, addr == "localhost" ? "127.0.0.1" : addr.c_str(), &a.sin_addr);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw Error("cannot find a free port on " + addr + "; pass --master-port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

pid_t start_process(const std::vector<std::string>& cmd, const std::string& output_path) {
  if (cmd.empty()) throw Error("start_process: empty command");
  pid_t pid = ::fork();
  if (pid < 0) throw Error("fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    if (!output_path.empty()) {
      int fd = ::open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(127);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_process(pid_t pid, bool block) {
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &status, block ? 0 : WNOHANG)) < 0 && errno == EINTR) {}
  if (r == 0) return -1;  // still running
  if (r < 0) throw Error("waitpid(" + std::to_string(pid) + "): " + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_process(const std::vector<std::string>& cmd, const std::string& output_path) {
  return wait_process(start_process(cmd, output_path));
}

void prepare_security(LaunchOptions* o) {
  if (o->security.empty()) o->security = "off";
  if (o->security != "off" && o->security != "curve")
    throw ConfigError("security: '" + o->security + "' is not known (known: off, curve)");
  if (o->security == "off") {
    if (o->nnodes > 1)
      DISTRL_LOG(Warn, "security is off across " << o->nnodes
                                                 << " nodes: anyone who can reach these ports can join "
                                                    "or read the world (set security: curve; docs/security.md)");
    return;
  }
  if (!o->security_key.empty()) {
    (void)transport::read_world_key(o->security_key);  // a bad key is refused before anything starts
  } else if (o->made_key.empty()) {
    if (o->nnodes > 1)
      throw ConfigError(
          "security: curve across nodes needs one key on every node: distrl-keygen FILE, copy FILE to "
          "each host, and pass --security-key FILE (or security_key: FILE)");
    o->made_key = "/tmp/distrl-" + std::to_string(::getpid()) + "-world.key";
    transport::write_world_key(o->made_key, transport::generate_world_key());
  }
  const std::string key = o->security_key.empty() ? o->made_key : o->security_key;
  ::setenv("DISTRL_CURVE_KEY", key.c_str(), 1);
  transport::use_security("curve", key);
}

namespace {

void check(const LaunchOptions& o) {
  if (o.command.empty()) throw ConfigError("no command given (usage: distrl-launch --nproc N -- CMD ARGS...)");
  if (o.nproc < 1 || o.nnodes < 1) throw ConfigError("--nproc and --nnodes must be at least 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw ConfigError("--node-rank " + std::to_string(o.node_rank) + " is not in [0, " + std::to_string(o.nnodes) +
                      ")");
  if (o.nnodes > 1 && o.master_port == 0)
    throw ConfigError("with --nnodes > 1 every node needs the same --master-port");
  if (o.max_restarts < 0) throw ConfigError("--max-restarts must not be negative");
  if (o.security == "curve" && !transport::curve_enabled())
    throw ConfigError("security: curve was asked for but not prepared (call prepare_security first)");
}

// The rendezvous store lives in node 0's launcher, not in rank 0: it outlives any rank, so every
// rank (rank 0 too) can die and be restarted into the running world.
std::unique_ptr<transport::StoreServer> serve_store(const LaunchOptions& o, int port) {
  if (o.node_rank != 0) return nullptr;
  const bool loopback = o.master_addr == "127.0.0.1" || o.master_addr == "localhost" || o.master_addr == "::1";
  try {
    return std::make_unique<transport::StoreServer>(
        "tcp://" + std::string(loopback ? "127.0.0.1" : "*") + ":" + std::to_string(port),
        transport::StoreLimits::from_env());
  } catch (const std::exception& e) {
    throw Error("cannot serve the rendezvous store on port " + std::to_string(port) + " (" + e.what() +
                "); pass another --master-port");
  }
}

// This node's ranks until every one has exited: their output pumped, a failed one restarted
// (max_restarts) or the others stopped, the launcher's own signals passed on.
class Supervisor {
 public:
  Supervisor(const LaunchOptions& o, int first, int world, int port)
      : o_(o), world_(world), port_(port), ranks_(o.nproc) {
    for (int i = 0; i < o_.nproc; ++i) {
      ranks_[i].global = first + i;
      ranks_[i].pid = spawn(o_, i, ranks_[i].global, world_, port_, 0, &ranks_[i].out_fd);
    }
  }

  // The first failing rank's exit code (128 + signal when the launcher was stopped), else 0.
  int run() {
    std::size_t running = ranks_.size();
    while (running > 0) {
      pump_outputs();
      for (auto& r : ranks_)
        if (!r.exited && reap(r)) --running;
      on_signals();
      if (stopping_ && Clock::now() >= kill_at_) {
        stop_all(SIGKILL);
        kill_at_ = Clock::time_point::max();
      }
    }
    for (auto& r : ranks_)  // drain what is left in the pipes
      while (r.out_fd >= 0 && pump(r, o_.prefix)) {}
    if (gone_ > 0 && first_failure_ == 0)
      std::cerr << "distrl-launch: the run finished without " << gone_ << " rank" << (gone_ == 1 ? "" : "s")
                << " that exited with an error (above)\n";
    return first_failure_;
  }

 private:
  void pump_outputs() {
    std::vector<pollfd> fds;
    for (auto& r : ranks_)
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    for (auto& r : ranks_)
      if (r.out_fd >= 0) {
        pollfd p{r.out_fd, POLLIN, 0};
        if (::poll(&p, 1, 0) > 0 && !pump(r, o_.prefix)) {
          ::close(r.out_fd);
          r.out_fd = -1;
        }
      }
  }

  // True when r has exited for good (not restarted).
  bool reap(Rank& r) {
    int status = 0;
    if (::waitpid(r.pid, &status, WNOHANG) != r.pid) return false;
    r.code = exit_code(status);
    transport::remove_ipc_files_of(r.pid);  // a killed rank could not
    if (r.code != 0 && !stopping_ && r.restarts < o_.max_restarts) {
      ++r.restarts;
      while (r.out_fd >= 0 && pump(r, o_.prefix)) {  // its last words first
      }
      if (r.out_fd >= 0) ::close(r.out_fd);
      std::cerr << "distrl-launch: rank " << r.global << " exited with code " << r.code << "; restarting it (restart "
                << r.restarts << " of " << o_.max_restarts << ")\n";
      r.pid = spawn(o_, static_cast<int>(&r - ranks_.data()), r.global, world_, port_, r.restarts, &r.out_fd);
      return false;
    }
    r.exited = true;
    // An expendable rank that had joined the world: the others cope. One that failed before
    // joining (a bad start) would leave them waiting in the rendezvous: that stops the run.
    if (r.code != 0 && !stopping_ && o_.expendable.count(r.global) && store_has(transport::joined_rank_key(r.global))) {
      std::cerr << "distrl-launch: rank " << r.global << " exited with code " << r.code
                << "; the run goes on without it (the ranks it served with name it lost)\n";
      mark_gone(r.global);
      ++gone_;
      return true;
    }
    if (r.code != 0 && first_failure_ == 0 && !stopping_) {
      std::cerr << "distrl-launch: rank " << r.global << " exited with code " << r.code << "; stopping the others\n";
      stop(r.code);
    }
    return true;
  }

  // Tells the store (node 0's launcher hosts it) that `rank` is gone, so that no graceful
  // shutdown waits for it. What fails here is said, never fatal: a waiter then times out instead.
  void mark_gone(int rank) {
    try {
      store().set(transport::dead_rank_key(rank), "1");
    } catch (const std::exception& e) {
      std::cerr << "distrl-launch: could not mark rank " << rank << " gone in the store (" << e.what()
                << "); the others' shutdown may wait out its timeout for it\n";
    }
  }

  bool store_has(const std::string& key) {
    try {
      return store().check({key});
    } catch (const std::exception& e) {
      std::cerr << "distrl-launch: cannot read the store (" << e.what() << ")\n";
      return false;
    }
  }

  // A client of the run's store (node 0's launcher hosts it), made when first needed.
  transport::Store& store() {
    if (!store_)
      store_ = std::make_unique<transport::Store>("tcp://" + o_.master_addr + ":" + std::to_string(port_),
                                                  std::chrono::seconds(5));
    return *store_;
  }

  void on_signals() {
    if (g_signal && !stopping_) {
      const char* name = g_signal == SIGINT ? "SIGINT" : "SIGTERM";
      std::cerr << "distrl-launch: " << name << ": stopping every rank (passed on as " << name
                << ": they finish their step, save and write their outputs; SIGKILL after --grace "
                << std::chrono::duration<double>(o_.grace).count() << " s). Press Ctrl-C again to kill them now.\n";
      stop(128 + g_signal, g_signal);
    } else if (g_signals > 1 && kill_at_ != Clock::time_point::max()) {
      std::cerr << "distrl-launch: second signal: killing every rank now\n";
      kill_at_ = Clock::now();
    }
  }

  // sig (SIGTERM, or the SIGINT a user gave the launcher: the ranks then say so) to every rank,
  // SIGKILL after the grace period; code is what the launcher returns.
  void stop(int code, int sig = SIGTERM) {
    first_failure_ = code;
    stopping_ = true;
    stop_all(sig);
    kill_at_ = Clock::now() + o_.grace;
  }

  void stop_all(int sig) {
    for (auto& r : ranks_)
      if (!r.exited) ::kill(-r.pid, sig);
  }

  const LaunchOptions& o_;
  const int world_, port_;
  std::vector<Rank> ranks_;
  int first_failure_ = 0;
  int gone_ = 0;  // expendable ranks that failed
  std::unique_ptr<transport::Store> store_;
  bool stopping_ = false;
  Clock::time_point kill_at_ = Clock::time_point::max();
};

}  // namespace

int launch(const LaunchOptions& o) {
  check(o);
  const int port = o.master_port ? o.master_port : free_port(o.master_addr);
  const int world = o.world_size > 0 ? o.world_size : o.nproc * o.nnodes;
  const int first = o.first_rank >= 0 ? o.first_rank : o.node_rank * o.nproc;
  if (first + o.nproc > world)
    throw ConfigError("ranks " + std::to_string(first) + ".." + std::to_string(first + o.nproc - 1) +
                      " on this node do not fit a world of " + std::to_string(world));
  const auto store = serve_store(o, port);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  return Supervisor(o, first, world, port).run();
}

}  // namespace distrl::tools
