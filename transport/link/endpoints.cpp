#include "transport/link/endpoints.h"
#include "transport/bootstrap/rendezvous.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "common/host.h"
#include "common/stop_signal.h"

namespace distrl::transport::detail {

// The boot id tells apart machines (and containers) named alike; the network namespace, two
// namespaces of one machine.
std::string host_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  // No boot id: it ends in '/', which claim_rank reads as "cannot be told from another host".
  if (boot.empty()) return host_name() + "/";
  std::error_code ec;
  const auto net = std::filesystem::read_symlink("/proc/self/ns/net", ec);  // "net:[4026531840]"
  return host_name() + "/" + boot + (ec ? std::string() : "/" + net.string());
}

std::string bind_ip(const WorldSpec& world, const std::string& bind_host) {
  if (!bind_host.empty()) return bind_host;
  return world.method == "file" ? "127.0.0.1" : local_address_towards(world.master_addr);
}

std::vector<std::string> endpoints_to_bind(Transport transport, const std::string& ip, const std::string& tag,
                                           std::string* ipc_path) {
  std::vector<std::string> eps;
  if (transport != Transport::Ipc) eps.push_back("tcp://" + ip + ":*");
  if (transport != Transport::Tcp) {
    std::random_device rd;
    *ipc_path = "/tmp/distrl-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(rd()) + ".ipc";
    remove_on_fatal_signal(ipc_path->c_str());  // ZeroMQ makes it at bind
    eps.push_back("ipc://" + *ipc_path);
  }
  return eps;
}

Address make_address(const std::string& name, Transport transport, const std::vector<std::string>& bound) {
  return Address{name,
                 host_id(),
                 host_name(),
                 transport != Transport::Ipc ? bound.at(0) : "",
                 transport != Transport::Tcp ? bound.back() : "",
                 ""};
}

namespace {

// An address record is a few strings: limits keep a forged record from asking for gigabytes.
Address decode_address(const std::string& raw, int rank) {
  const msgpack::unpack_limit limits(64, 64, 4096, 4096, 64, 8);
  Address a;
  try {
    std::size_t off = 0;
    msgpack::unpack(raw.data(), raw.size(), off, nullptr, nullptr, limits).get().convert(a);
  } catch (const std::exception& e) {
    throw ProtocolError("rendezvous: the address record of rank " + std::to_string(rank) +
                        " is malformed: " + e.what());
  }
  return a;
}

// "rank 1 ('observer1', pid 4242 on gpu3)".
std::string who(int rank, const Address& a) {
  return "rank " + std::to_string(rank) + " ('" + a.name + "', pid " + std::to_string(a.pid) + " on " + a.hostname +
         ")";
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks after boot) and the process state;
// empty when pid does not exist here.
std::string start_time_of(const std::string& pid, char* state = nullptr) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return "";
  const auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return "";
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 3 && state) *state = field.empty() ? '?' : field[0];
  return field;
}

// This process as another can recognise it: "<pid namespace>/<start time>". Empty parts when
// /proc does not say.
std::string this_process() {
  std::error_code ec;
  const auto ns = std::filesystem::read_symlink("/proc/self/ns/pid", ec);
  return (ec ? std::string() : ns.string()) + "/" + start_time_of("self");
}

// True while the process of record `a` runs on this host: same pid namespace, the pid there,
// not a zombie, started when the record says (so not a reused pid).
bool still_runs(const Address& a) {
  const std::string mine = this_process();
  const auto slash = a.process.rfind('/');
  if (a.process.empty() || slash == std::string::npos || mine.substr(0, mine.rfind('/')) != a.process.substr(0, slash))
    return false;  // another pid namespace (container), or a record that does not say: cannot be checked
  char state = '?';
  const std::string started = start_time_of(std::to_string(a.pid), &state);
  return !started.empty() && started == a.process.substr(slash + 1) && state != 'Z' && state != 'X';
}

// A store that hosted the world and stopped answering mid-rendezvous: its host (rank 0, or the
// launcher) exited, e.g. refusing this world. Say so now rather than at the rendezvous timeout.
constexpr std::chrono::milliseconds kStoreAnswer{5000};
template <class F>
auto answered(Store& store, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const TimeoutError&) {
    throw TimeoutError("rendezvous: the store at " + store.endpoint() + " stopped answering for " +
                       std::to_string(kStoreAnswer.count() / 1000) +
                       " s: the process that hosts it (rank 0, or distrl-launch) has exited or hangs; see its output");
  }
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) out += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  return out;
}

// Who held this rank before: the claim counter is atomic, so of two processes started as one
// rank at the same moment exactly one sees that it is the second. ConfigError when that holder
// still runs on this host; a restart (the holder gone, or on another host) is logged.
void claim_rank(Store& store, const std::string& key_prefix, const std::string& key, int rank, const Address& me,
                const std::string& self) {
  if (store.add(key_prefix + "claims/" + std::to_string(rank), 1) <= 1) return;
  std::optional<Address> holder;
  try {  // the holder claims, then publishes: give it a moment
    holder = decode_address(store.get(key, std::chrono::milliseconds(3000)), rank);
  } catch (const TimeoutError&) {}  // it died between the two: nothing to check
  // A host whose boot id could not be read ends in '/': it cannot be told from another.
  const bool same_host = holder && holder->host_id == me.host_id && me.host_id.back() != '/';
  if (!holder || holder->process == me.process) return;
  if (same_host && still_runs(*holder))
    throw ConfigError("rendezvous: rank " + std::to_string(rank) + " is taken: " + who(rank, *holder) +
                      " runs already, so " + self + " stops; give each process its own rank (RANK or --rank)");
  DISTRL_LOG(Info, "rendezvous: " << self << " takes over rank " << rank << " from "
                                  << (same_host ? "" : "(cannot check one on another host or pid namespace) ")
                                  << who(rank, *holder) << ": a restart");
}

// The progress line of a rendezvous still waiting: rank 0 names the missing ranks.
void report_waiting(const std::string& name, int rank, int world, const std::vector<int>& missing, long long waited,
                    std::chrono::milliseconds timeout) {
  const std::string give_up = std::to_string(timeout.count() / 1000.0).substr(0, 5);
  if (rank == 0)
    DISTRL_LOG(Info, "rendezvous: " << name << " waiting for rank" << (missing.size() > 1 ? "s " : " ")
                                    << rank_list(missing) << ": " << world - static_cast<int>(missing.size()) << " of "
                                    << world << " joined, " << waited << " s (gives up after " << give_up << " s)");
  else
    DISTRL_LOG(Info, "rendezvous: " << name << " waiting for " << missing.size() << " of " << world << " ranks, "
                                    << waited << " s (gives up after " << give_up << " s)");
}

}  // namespace

std::vector<Address> exchange_addresses(Store& store, const std::string& key_prefix, int rank, int world, Address me,
                                        std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  me.world = world;
  me.pid = static_cast<int>(::getpid());
  me.process = this_process();
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key_prefix + std::to_string(r));
  const std::string refused_key = key_prefix + "refused";
  const std::string self = "this process (rank " + std::to_string(rank) + ", '" + me.name + "', pid " +
                           std::to_string(me.pid) + " on " + me.hostname + ")";
  const auto check = [&](const std::string& key) {
    return answered(store, [&] { return store.check({key}, kStoreAnswer); });
  };
  const auto read = [&](int r) {
    Address a = decode_address(answered(store, [&] { return store.get(keys[r], kStoreAnswer); }), r);
    if (a.world < 1)
      throw ProtocolError("rendezvous: the address record of " + who(r, a) +
                          " gives no world size: it runs another "
                          "distrl build (give every process the same one)");
    return a;
  };

  claim_rank(store, key_prefix, keys[rank], rank, me, self);
  msgpack::sbuffer buf;
  msgpack::pack(buf, me);
  store.set(keys[rank], std::string(buf.data(), buf.size()));

  // Wait for every record in slices. Each slice a rank compares its world size with rank 0's
  // record (once it is there) and looks for a refusal another rank published; rank 0 names the
  // ranks still missing every 5 s (a check per missing rank then: the only per-rank polling).
  std::vector<std::optional<Address>> seen(world);
  seen[rank] = me;
  // Publishes the mismatch for every rank still waiting, then refuses.
  const auto refuse_mismatch = [&](int r) {
    const std::string mismatch = "world size mismatch: " + who(rank, me) + " was started with world size " +
                                 std::to_string(world) + ", " + who(r, *seen[r]) + " with " +
                                 std::to_string(seen[r]->world) +
                                 "; start every process with the same world size (WORLD_SIZE or --world-size)";
    store.set(refused_key, mismatch, kStoreAnswer);
    throw ConfigError("rendezvous: " + mismatch);
  };
  auto next_report = start + std::chrono::seconds(2);  // then every 5 s: a start is never silent for long
  for (;;) {
    if (check(refused_key))
      throw ConfigError("rendezvous: " + answered(store, [&] { return store.get(refused_key, kStoreAnswer); }) +
                        " (found by another rank; " + self + " stops too)");
    if (!seen[0] && check(keys[0])) seen[0] = read(0);
    if (seen[0] && seen[0]->world != world) refuse_mismatch(0);
    const auto now = Clock::now();
    const bool report = now >= next_report, last = now >= deadline;
    std::vector<int> missing;
    if (report || last) {  // which ranks: one check per rank, every 5 s at most
      for (int r = 0; r < world; ++r)
        if (!seen[r] && check(keys[r])) seen[r] = read(r);
      for (int r = 0; r < world; ++r) {
        if (!seen[r]) missing.push_back(r);
        else if (seen[r]->world != world) refuse_mismatch(r);
      }
      if (missing.empty()) break;
    }
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    if (last)
      throw TimeoutError("rendezvous: rank(s) " + rank_list(missing) + " of world size " + std::to_string(world) +
                         " did not join within " + std::to_string(timeout.count()) +
                         " ms (started? same world size and master address?)");
    if (report) {
      report_waiting(me.name, rank, world, missing, waited, timeout);
      next_report = now + std::chrono::seconds(5);
    }
    std::vector<std::string> wanted;
    for (int r = 0; r < world; ++r)
      if (!seen[r]) wanted.push_back(keys[r]);
    if (!wanted.empty()) {
      const auto slice = std::min<Clock::duration>(std::chrono::milliseconds(500), deadline - now);
      try {
        store.wait(wanted, std::max(std::chrono::milliseconds(1),
                                    std::chrono::duration_cast<std::chrono::milliseconds>(slice)));
      } catch (const TimeoutError&) {
        continue;  // the loop above looks again
      }
    }
    for (int r = 0; r < world; ++r)  // all there: read them, compare, go
      if (!seen[r]) seen[r] = read(r);
    for (int r = 0; r < world; ++r)
      if (seen[r]->world != world) refuse_mismatch(r);
    break;
  }
  std::vector<Address> out;
  for (auto& a : seen) out.push_back(std::move(*a));
  return out;
}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::Auto: return "auto";
    case Transport::Shm: return "shm";
    case Transport::Zmq: return "zmq";
    case Transport::Tcp: return "tcp";
    case Transport::Ipc: return "ipc";
  }
  return "?";
}

Transport parse_transport(const std::string& transport, const std::string& who) {
  std::string t = transport;
  if (t == "auto") {
    const char* env = std::getenv("DISTRL_TRANSPORT");
    if (env != nullptr && *env != '\0') t = env;
  }
  for (Transport c : {Transport::Auto, Transport::Shm, Transport::Zmq, Transport::Tcp, Transport::Ipc})
    if (t == transport_name(c)) return c;
  throw ConfigError(who + ": transport is '" + t + "'" + (t != transport ? " (from DISTRL_TRANSPORT)" : "") +
                    ", allowed: auto, shm, zmq, tcp, ipc");
}

Transport zmq_transport(Transport t) {
  if (t == Transport::Auto) return Transport::Zmq;
  return t == Transport::Shm ? Transport::Ipc : t;
}

std::string private_socket_dir(const std::string& base) {
  const auto uid = ::geteuid();
  std::string dir = base + "/distrl-u" + std::to_string(uid);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw TransportError("shared memory: cannot make " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw TransportError("shared memory: " + dir + ": " + std::strerror(errno));
  const char* what = nullptr;
  if (S_ISLNK(st.st_mode)) what = "is a symbolic link";
  else if (!S_ISDIR(st.st_mode)) what = "is not a directory";
  else if (st.st_uid != uid) what = "belongs to another user";
  else if ((st.st_mode & 077) != 0) what = "is open to other users";
  if (what != nullptr) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw TransportError("shared memory: " + dir + " " + what + " (owner uid " + std::to_string(st.st_uid) + ", mode " +
                         mode + "); it must be a directory of uid " + std::to_string(uid) +
                         " that only it can use: remove it (or chmod 700 it, if it is yours)");
  }
  return dir;
}

std::string shm_endpoint_to_bind(const std::string& tag) {
  std::random_device rd;
  return "shm://" + private_socket_dir() + "/distrl-" + std::to_string(::getpid()) + "-" + tag + "-shm-" +
         std::to_string(rd()) + ".ipc";
}

bool shm_reachable(const Address& me, const Address& peer) { return peer.host_id == me.host_id && !peer.shm.empty(); }

std::string new_member_key() {
  std::random_device rd;
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return hex;
}

std::string world_member_key(Store& store, const std::string& key, int rank, std::chrono::milliseconds timeout) {
  if (rank == 0 && !store.check({key})) store.set(key, new_member_key());
  return store.get(key, timeout);
}

std::string member_tag(const std::string& key, int rank) {
  auto mix = [](std::uint64_t z) {  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(rank));
  for (unsigned char c : key) h = mix(h ^ c);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j;
  }
  return out;
}

std::string endpoint_for(const Address& me, const Address& peer, Transport transport) {
  if (transport == Transport::Auto && shm_reachable(me, peer)) return peer.shm;
  if (transport == Transport::Shm) {
    if (!shm_reachable(me, peer))
      throw ConfigError("'" + peer.name + "' serves no shared memory on this host (" + peer.hostname +
                        "); use transport auto, zmq or tcp");
    return peer.shm;
  }
  const bool same_host = peer.host_id == me.host_id && !peer.ipc.empty() && transport != Transport::Tcp;
  if (!same_host && peer.tcp.empty())
    throw ConfigError("'" + peer.name + "' serves only ipc:// but runs on another host (" + peer.hostname +
                      "); use transport auto or tcp");
  return same_host ? peer.ipc : peer.tcp;
}

}  // namespace distrl::transport::detail

namespace distrl::transport {

void remove_ipc_files_of(int pid) {
  const std::string prefix = "distrl-" + std::to_string(pid) + "-";  // endpoints_to_bind's names
  // ZeroMQ's ipc:// files in /tmp, the shared-memory sockets in this uid's private directory.
  for (const std::string& dir : {std::string("/tmp"), "/tmp/distrl-u" + std::to_string(::geteuid())}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".ipc") std::filesystem::remove(e.path(), ec);
    }
  }
}

}  // namespace distrl::transport
