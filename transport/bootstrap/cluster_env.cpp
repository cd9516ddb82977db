#include "transport/bootstrap/cluster_env.h"

#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace distrl::transport {
namespace {

constexpr int kMaxWorld = 1 << 20;

// Reads variables for one source; every error names the source and the variable.
struct Reader {
  const EnvLookup& env;
  std::string source;

  const char* raw(const char* name) const {
    const char* v = env(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  }
  bool has(const char* name) const { return raw(name) != nullptr; }
  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError("cluster environment (" + source + "): " + what);
  }
  int parse(const char* name, const char* text, int lo, int hi) const {
    try {
      std::size_t pos = 0;
      const long v = std::stol(text, &pos);
      if (pos == std::string(text).size() && v >= lo && v <= hi) return static_cast<int>(v);
    } catch (const std::exception&) {}
    fail(std::string(name) + " is '" + text + "', expected an integer in [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "]");
  }
  int integer(const char* name, int lo, int hi, int fallback) const {
    const char* v = raw(name);
    return v ? parse(name, v, lo, hi) : fallback;
  }
  int required(const char* name, int lo, int hi, const std::string& why) const {
    const char* v = raw(name);
    if (!v) fail(std::string(name) + " is not set (" + why + ")");
    return parse(name, v, lo, hi);
  }
  std::string text(const char* name) const {
    const char* v = raw(name);
    return v ? v : "";
  }
};

void check_ranges(const Reader& r, const ClusterEnv& c, const char* rank_var, const char* world_var) {
  if (c.rank >= 0 && c.world_size > 0 && c.rank >= c.world_size)
    r.fail(std::string(rank_var) + "=" + std::to_string(c.rank) + " is not below " + world_var + "=" +
           std::to_string(c.world_size));
  if (c.local_rank >= 0 && c.local_world_size > 0 && c.local_rank >= c.local_world_size)
    r.fail("the local rank " + std::to_string(c.local_rank) + " is not below the local world size " +
           std::to_string(c.local_world_size));
  if (c.node_rank >= 0 && c.nnodes > 0 && c.node_rank >= c.nnodes)
    r.fail("the node rank " + std::to_string(c.node_rank) + " is not below the node count " + std::to_string(c.nnodes));
}

// MASTER_ADDR / MASTER_PORT override what a source derives.
void master_from_env(const Reader& r, ClusterEnv* c) {
  if (r.has("MASTER_ADDR")) c->master_addr = r.text("MASTER_ADDR");
  if (r.has("MASTER_PORT")) c->master_port = r.parse("MASTER_PORT", r.raw("MASTER_PORT"), 1, 65535);
}

ClusterEnv torchrun(const Reader& r) {
  ClusterEnv c;
  c.source = "torchrun";
  const std::string why = "torchrun sets it for every worker; is this process started by torchrun?";
  c.rank = r.required("RANK", 0, kMaxWorld, why);
  c.world_size = r.required("WORLD_SIZE", 1, kMaxWorld, why);
  c.local_rank = r.required("LOCAL_RANK", 0, kMaxWorld, why);
  c.local_world_size = r.integer("LOCAL_WORLD_SIZE", 1, kMaxWorld, -1);
  c.node_rank = r.integer("GROUP_RANK", 0, kMaxWorld, -1);
  if (c.local_world_size > 0 && c.world_size % c.local_world_size == 0) c.nnodes = c.world_size / c.local_world_size;
  master_from_env(r, &c);
  if (c.master_addr.empty() || c.master_port == 0) r.fail("MASTER_ADDR and MASTER_PORT must both be set (" + why + ")");
  c.restart_count = r.integer("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30, 0);
  c.max_restarts = r.integer("TORCHELASTIC_MAX_RESTARTS", 0, 1 << 30, -1);
  c.run_id = r.text("TORCHELASTIC_RUN_ID");
  check_ranges(r, c, "RANK", "WORLD_SIZE");
  return c;
}

ClusterEnv plain_env(const Reader& r) {
  ClusterEnv c;
  c.source = "env";
  if (!r.has("RANK") || !r.has("WORLD_SIZE"))
    r.fail(std::string(r.has("RANK") ? "RANK" : "WORLD_SIZE") + " is set but " +
           (r.has("RANK") ? "WORLD_SIZE" : "RANK") + " is not: set both (distrl-launch, torchrun and PyTorchJob do)");
  c.rank = r.required("RANK", 0, kMaxWorld, "");
  c.world_size = r.required("WORLD_SIZE", 1, kMaxWorld, "");
  c.local_rank = r.integer("LOCAL_RANK", 0, kMaxWorld, -1);
  c.local_world_size = r.integer("LOCAL_WORLD_SIZE", 1, kMaxWorld, -1);
  c.node_rank = r.integer("GROUP_RANK", 0, kMaxWorld, -1);
  master_from_env(r, &c);
  c.restart_count = r.integer("DISTRL_RESTART_COUNT", 0, 1 << 30, 0);
  // The pitfall: a platform that counts nodes in WORLD_SIZE (and the node index in RANK) for a
  // per-node launcher, while several ranks run on each node.
  const int nnodes = r.integer("PET_NNODES", 1, kMaxWorld, -1);
  const char* nproc_text = r.raw("PET_NPROC_PER_NODE");
  int nproc = -1;
  if (nproc_text && std::string(nproc_text).find_first_not_of("0123456789") == std::string::npos)
    nproc = r.parse("PET_NPROC_PER_NODE", nproc_text, 1, kMaxWorld);
  if (nnodes > 0 && nproc > 1 && c.world_size == nnodes && c.local_world_size < 0)
    r.fail("WORLD_SIZE=" + std::to_string(c.world_size) +
           " equals PET_NNODES: this platform counts nodes in "
           "WORLD_SIZE, but PET_NPROC_PER_NODE=" +
           std::to_string(nproc) + " ranks run per node, so the world has " + std::to_string(nnodes * nproc) +
           " ranks. Start distrl-launch once per node (it reads PET_*) instead of "
           "the ranks themselves, or set WORLD_SIZE and RANK per rank");
  check_ranges(r, c, "RANK", "WORLD_SIZE");
  return c;
}

ClusterEnv slurm(const Reader& r) {
  ClusterEnv c;
  c.source = "slurm";
  c.rank = r.required("SLURM_PROCID", 0, kMaxWorld, "srun sets it");
  c.world_size = r.has("SLURM_NTASKS") ? r.required("SLURM_NTASKS", 1, kMaxWorld, "")
                                       : r.required("SLURM_NPROCS", 1, kMaxWorld, "srun sets SLURM_NTASKS");
  c.local_rank = r.integer("SLURM_LOCALID", 0, kMaxWorld, -1);
  c.node_rank = r.integer("SLURM_NODEID", 0, kMaxWorld, -1);
  c.nnodes = r.has("SLURM_NNODES") ? r.integer("SLURM_NNODES", 1, kMaxWorld, -1)
                                   : r.integer("SLURM_JOB_NUM_NODES", 1, kMaxWorld, -1);
  const bool step_tasks = r.has("SLURM_STEP_TASKS_PER_NODE");
  const std::string tasks_spec = r.text(step_tasks ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE");
  if (!tasks_spec.empty()) {
    const auto tasks = expand_slurm_tasks_per_node(tasks_spec);
    long sum = 0;
    for (int t : tasks) sum += t;
    const char* name = step_tasks ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    if (sum != c.world_size)
      r.fail(std::string(name) + "='" + tasks_spec + "' adds up to " + std::to_string(sum) +
             " tasks, SLURM_NTASKS=" + std::to_string(c.world_size));
    if (c.nnodes > 0 && static_cast<int>(tasks.size()) != c.nnodes)
      r.fail(std::string(name) + "='" + tasks_spec + "' lists " + std::to_string(tasks.size()) +
             " nodes, SLURM_NNODES=" + std::to_string(c.nnodes));
    if (c.node_rank >= 0 && c.node_rank < static_cast<int>(tasks.size())) c.local_world_size = tasks[c.node_rank];
  }
  const bool step_list = r.has("SLURM_STEP_NODELIST");
  const std::string list = r.text(step_list ? "SLURM_STEP_NODELIST"
                                            : (r.has("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST"));
  if (!list.empty()) {
    const auto hosts = expand_slurm_nodelist(list);
    if (step_list && c.nnodes > 0 && static_cast<int>(hosts.size()) != c.nnodes)
      r.fail("SLURM_STEP_NODELIST='" + list + "' names " + std::to_string(hosts.size()) +
             " nodes, SLURM_NNODES=" + std::to_string(c.nnodes));
    c.master_addr = hosts.front();
  }
  c.run_id = r.text("SLURM_JOB_ID");
  if (!c.run_id.empty()) c.master_port = 20000 + r.parse("SLURM_JOB_ID", c.run_id.c_str(), 0, 1 << 30) % 20000;
  c.restart_count = r.integer("SLURM_RESTART_COUNT", 0, 1 << 30, 0);
  master_from_env(r, &c);
  check_ranges(r, c, "SLURM_PROCID", "SLURM_NTASKS");
  return c;
}

ClusterEnv trainjob(const Reader& r) {
  ClusterEnv c;
  c.source = "trainjob";
  c.nnodes = r.required("PET_NNODES", 1, kMaxWorld, "");
  c.node_rank = r.required("PET_NODE_RANK", 0, kMaxWorld, "TrainJob sets it with PET_NNODES");
  const std::string nproc = r.text("PET_NPROC_PER_NODE");
  c.local_world_size = nproc.empty() ? 1
                       : nproc.find_first_not_of("0123456789") == std::string::npos
                           ? r.parse("PET_NPROC_PER_NODE", nproc.c_str(), 1, kMaxWorld)
                           : -1;  // "auto", "gpu": the per-node launcher decides
  if (c.local_world_size == 1) {  // one rank per node: this process is that rank
    c.rank = c.node_rank;
    c.world_size = c.nnodes;
    c.local_rank = 0;
  } else if (c.local_world_size > 1) {
    c.world_size = c.nnodes * c.local_world_size;
  }
  c.master_addr = r.text("PET_MASTER_ADDR");
  if (r.has("PET_MASTER_PORT")) c.master_port = r.parse("PET_MASTER_PORT", r.raw("PET_MASTER_PORT"), 1, 65535);
  master_from_env(r, &c);
  check_ranges(r, c, "PET_NODE_RANK", "PET_NNODES");
  return c;
}

ClusterEnv mpi(const Reader& r) {
  ClusterEnv c;
  c.source = "mpi";
  const bool ompi = r.has("OMPI_COMM_WORLD_RANK");
  c.rank = r.required(ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", 0, kMaxWorld, "");
  c.world_size = r.required(ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE", 1, kMaxWorld, "mpirun sets it with the rank");
  c.local_rank = r.integer(ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "MPI_LOCALRANKID", 0, kMaxWorld, -1);
  c.local_world_size = r.integer(ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS", 1, kMaxWorld, -1);
  master_from_env(r, &c);
  check_ranges(r, c, ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE");
  return c;
}

[[noreturn]] void bad_list(const std::string& what, const std::string& text) {
  throw ConfigError("cluster environment (slurm): malformed " + what + " '" + text + "'");
}

// Splits at commas outside brackets.
std::vector<std::string> split_top(const std::string& s, const std::string& what) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : s) {
    if (ch == '[') ++depth;
    if (ch == ']' && --depth < 0) bad_list(what, s);
    if (ch == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (depth != 0) bad_list(what, s);
  out.push_back(cur);
  for (const auto& part : out)
    if (part.empty()) bad_list(what, s);
  return out;
}

long parse_number(const std::string& text, const std::string& what, const std::string& whole) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    bad_list(what, whole);
  return std::stol(text);
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& list) {
  const std::string what = "node list";
  std::vector<std::string> hosts;
  for (const auto& item : split_top(list, what)) {
    const auto open = item.find('[');
    if (open == std::string::npos) {
      if (item.find(']') != std::string::npos) bad_list(what, list);
      hosts.push_back(item);
      continue;
    }
    const auto close = item.find(']', open);
    if (close == std::string::npos || item.find('[', open + 1) != std::string::npos) bad_list(what, list);
    const std::string prefix = item.substr(0, open), suffix = item.substr(close + 1);
    std::stringstream ranges(item.substr(open + 1, close - open - 1));
    for (std::string range; std::getline(ranges, range, ',');) {
      const auto dash = range.find('-');
      const std::string lo_text = range.substr(0, dash);
      const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
      const long lo = parse_number(lo_text, what, list), hi = parse_number(hi_text, what, list);
      if (hi < lo || hi - lo > 100000) bad_list(what, list);
      for (long n = lo; n <= hi; ++n) {
        std::string num = std::to_string(n);
        if (num.size() < lo_text.size()) num.insert(0, lo_text.size() - num.size(), '0');  // "n[08-10]"
        hosts.push_back(prefix + num + suffix);
      }
    }
  }
  if (hosts.empty()) bad_list(what, list);
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& spec) {
  const std::string what = "tasks per node";
  std::vector<int> out;
  for (const auto& item : split_top(spec, what)) {
    const auto paren = item.find("(x");
    const long tasks = parse_number(item.substr(0, paren), what, spec);
    long times = 1;
    if (paren != std::string::npos) {
      if (item.back() != ')') bad_list(what, spec);
      times = parse_number(item.substr(paren + 2, item.size() - paren - 3), what, spec);
    }
    if (tasks < 1 || times < 1 || times > 100000) bad_list(what, spec);
    out.insert(out.end(), static_cast<std::size_t>(times), static_cast<int>(tasks));
  }
  return out;
}

ClusterEnv read_cluster_env(const EnvLookup& env) {
  const auto has = [&](const char* n) {
    const char* v = env(n);
    return v != nullptr && *v != '\0';
  };
  if (has("TORCHELASTIC_RUN_ID")) return torchrun(Reader{env, "torchrun"});
  if (has("RANK") || has("WORLD_SIZE")) return plain_env(Reader{env, "RANK/WORLD_SIZE"});
  if (has("SLURM_PROCID")) return slurm(Reader{env, "slurm"});
  if (has("PET_NNODES")) return trainjob(Reader{env, "trainjob"});
  if (has("OMPI_COMM_WORLD_RANK") || has("PMI_RANK")) return mpi(Reader{env, "mpi"});
  ClusterEnv none;
  master_from_env(Reader{env, "MASTER_ADDR/MASTER_PORT"}, &none);
  return none;
}

ClusterEnv read_cluster_env() {
  return read_cluster_env([](const char* n) -> const char* { return std::getenv(n); });
}

NodeEnv read_node_env(const EnvLookup& env) {
  const auto has = [&](const char* n) {
    const char* v = env(n);
    return v != nullptr && *v != '\0';
  };
  NodeEnv n;
  if (has("RANK") || has("TORCHELASTIC_RUN_ID")) return n;
  ClusterEnv c;
  if (has("PET_NNODES")) {
    c = trainjob(Reader{env, "trainjob"});
    n.nproc_per_node = c.local_world_size;
  } else if (has("SLURM_NODEID") && has("SLURM_NNODES") && has("SLURM_PROCID")) {
    c = slurm(Reader{env, "slurm"});
    if (c.world_size != c.nnodes) return n;  // several tasks per node: they are the ranks, not launchers
  } else {
    return n;
  }
  n.source = c.source;
  n.nnodes = c.nnodes;
  n.node_rank = c.node_rank;
  n.master_addr = c.master_addr;
  n.master_port = c.master_port;
  return n;
}

NodeEnv read_node_env() {
  return read_node_env([](const char* n) -> const char* { return std::getenv(n); });
}

std::string ClusterEnv::describe() const {
  if (!found()) return "no launcher environment";
  std::ostringstream s;
  s << source << ":";
  if (rank >= 0) s << " rank " << rank << " of " << world_size << ",";
  if (local_rank >= 0 || local_world_size > 0)
    s << " local " << (local_rank >= 0 ? std::to_string(local_rank) : "?") << " of "
      << (local_world_size > 0 ? std::to_string(local_world_size) : "?") << ",";
  if (node_rank >= 0 || nnodes > 0)
    s << " node " << (node_rank >= 0 ? std::to_string(node_rank) : "?") << " of "
      << (nnodes > 0 ? std::to_string(nnodes) : "?") << ",";
  s << " master " << (master_addr.empty() ? "?" : master_addr) << ":"
    << (master_port ? std::to_string(master_port) : "?");
  if (restart_count > 0) s << ", restart " << restart_count;
  return s.str();
}

}  // namespace distrl::transport
