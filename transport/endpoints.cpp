#include "transport/detail/endpoints.h"
#include "transport/rendezvous.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "common/error.h"
#include "common/log.h"
#include "common/stop_signal.h"

namespace distrl::transport::detail {

std::string hostname() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// The boot id tells apart containers named alike.
std::string host_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  return hostname() + "/" + boot;
}

std::string bind_ip(const WorldSpec& world, const std::string& bind_host) {
  if (!bind_host.empty()) return bind_host;
  return world.method == "file" ? "127.0.0.1" : local_address_towards(world.master_addr);
}

std::vector<std::string> endpoints_to_bind(const std::string& transport, const std::string& ip, const std::string& tag,
                                           std::string* ipc_path) {
  std::vector<std::string> eps;
  if (transport != "ipc") eps.push_back("tcp://" + ip + ":*");
  if (transport != "tcp") {
    std::random_device rd;
    *ipc_path = "/tmp/distrl-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(rd()) + ".ipc";
    remove_on_fatal_signal(ipc_path->c_str());  // ZeroMQ makes it at bind
    eps.push_back("ipc://" + *ipc_path);
  }
  return eps;
}

Address make_address(const std::string& name, const std::string& transport, const std::vector<std::string>& bound) {
  return Address{name, host_id(), hostname(), transport != "ipc" ? bound.at(0) : "",
                 transport != "tcp" ? bound.back() : "", ""};
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
    throw ProtocolError("rendezvous: the address record of rank " + std::to_string(rank) + " is malformed: " + e.what());
  }
  return a;
}

// "rank 1 ('observer1', pid 4242 on gpu3)".
std::string who(int rank, const Address& a) {
  return "rank " + std::to_string(rank) + " ('" + a.name + "', pid " + std::to_string(a.pid) + " on " + a.hostname + ")";
}

// True while pid runs on this host (a zombie, dead but not yet reaped, does not count).
bool process_runs(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto paren = line.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' && line[paren + 2] != 'X';
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

}  // namespace

std::vector<Address> exchange_addresses(Store& store, const std::string& key_prefix, int rank, int world, Address me,
                                        std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  me.world = world;
  me.pid = static_cast<int>(::getpid());
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key_prefix + std::to_string(r));
  const std::string self = "this process (rank " + std::to_string(rank) + ", '" + me.name + "', pid " +
                           std::to_string(me.pid) + " on " + me.hostname + ")";

  // Who held this rank before: the claim counter is atomic, so of two processes started as one
  // rank at the same moment exactly one sees that it is the second.
  if (store.add(key_prefix + "claims/" + std::to_string(rank), 1) > 1) {
    std::optional<Address> holder;
    try {  // the holder claims, then publishes: give it a moment
      holder = decode_address(store.get(keys[rank], std::chrono::milliseconds(3000)), rank);
    } catch (const TimeoutError&) {
    }  // it died between the two: nothing to check
    if (holder && holder->pid != me.pid) {
      if (holder->host_id == me.host_id && process_runs(holder->pid))
        throw ConfigError("rendezvous: rank " + std::to_string(rank) + " is taken: " + who(rank, *holder) +
                          " runs already, so " + self + " stops; give each process its own rank (RANK or --rank)");
      DISTRL_LOG(Info, "rendezvous: " << self << " takes over rank " << rank << " from "
                                       << (holder->host_id == me.host_id ? "" : "(cannot check one on another host) ")
                                       << who(rank, *holder) << ": a restart");
    }
  }
  msgpack::sbuffer buf;
  msgpack::pack(buf, me);
  store.set(keys[rank], std::string(buf.data(), buf.size()));

  // Wait in slices, reading each record as it comes: a record of another world size is refused
  // at once, and every 5 s the ranks still missing are named.
  std::vector<std::optional<Address>> seen(world);
  auto next_report = start + std::chrono::seconds(5);
  for (;;) {
    std::vector<int> missing;
    for (int r = 0; r < world; ++r) {
      if (!seen[r] && answered(store, [&] { return store.check({keys[r]}, kStoreAnswer); })) {
        seen[r] = decode_address(answered(store, [&] { return store.get(keys[r], kStoreAnswer); }), r);
        if (seen[r]->world != world)
          throw ConfigError("rendezvous: world size mismatch: " + who(r, *seen[r]) + " was started with world size " +
                            std::to_string(seen[r]->world) + ", " + self + " with " + std::to_string(world) +
                            "; start every process with the same world size (WORLD_SIZE or --world-size)");
      }
      if (!seen[r]) missing.push_back(r);
    }
    if (missing.empty()) break;
    const auto now = Clock::now();
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    if (now >= deadline)
      throw TimeoutError("rendezvous: rank(s) " + rank_list(missing) + " of world size " + std::to_string(world) +
                         " did not join within " + std::to_string(timeout.count()) +
                         " ms (started? same world size and master address?)");
    if (now >= next_report) {
      DISTRL_LOG(Info, "rendezvous: " << me.name << " waiting for rank" << (missing.size() > 1 ? "s " : " ")
                                      << rank_list(missing) << ": " << world - static_cast<int>(missing.size())
                                      << " of " << world << " joined, " << waited << " s (gives up after "
                                      << timeout.count() / 1000 << " s)");
      next_report = now + std::chrono::seconds(5);
    }
    std::vector<std::string> wanted;
    for (int r : missing) wanted.push_back(keys[r]);
    const auto slice = std::min<Clock::duration>(std::chrono::milliseconds(500), deadline - now);
    try {
      store.wait(wanted, std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(slice)));
    } catch (const TimeoutError&) {
    }  // the loop above reads what came and decides
  }
  std::vector<Address> out;
  for (auto& a : seen) out.push_back(std::move(*a));
  return out;
}

std::string checked_transport(const std::string& transport, const std::string& who) {
  std::string t = transport;
  if (t == "auto") {
    const char* env = std::getenv("DISTRL_TRANSPORT");
    if (env != nullptr && *env != '\0') t = env;
  }
  if (t != "auto" && t != "shm" && t != "zmq" && t != "tcp" && t != "ipc")
    throw ConfigError(who + ": transport is '" + t + "'" + (t != transport ? " (from DISTRL_TRANSPORT)" : "") +
                      ", allowed: auto, shm, zmq, tcp, ipc");
  return t;
}

std::string zmq_transport(const std::string& transport) {
  if (transport == "auto" || transport == "zmq") return "auto";
  return transport == "shm" ? "ipc" : transport;
}

std::string shm_endpoint_to_bind(const std::string& tag) {
  std::random_device rd;
  return "shm:///tmp/distrl-" + std::to_string(::getpid()) + "-" + tag + "-shm-" + std::to_string(rd()) + ".ipc";
}

namespace {

// The one test of whether `me` can reach `peer` over shared memory.
bool shm_reachable(const Address& me, const Address& peer) { return peer.host_id == me.host_id && !peer.shm.empty(); }

}  // namespace

bool world_uses_shm(const Address& me, const std::vector<Address>& peers, const std::string& transport) {
  if (transport != "auto" && transport != "shm") return false;
  for (const auto& p : peers) {
    if (shm_reachable(me, p)) continue;
    if (transport == "auto") return false;
    throw ConfigError("transport shm: '" + p.name + "' runs on another host (" + p.hostname +
                      ") or serves no shared memory; use transport auto, zmq or tcp");
  }
  return true;
}

std::string endpoint_for(const Address& me, const Address& peer, const std::string& transport) {
  if (transport == "shm") {
    if (!shm_reachable(me, peer))
      throw ConfigError("'" + peer.name + "' serves no shared memory on this host (" + peer.hostname +
                        "); use transport auto, zmq or tcp");
    return peer.shm;
  }
  const bool same_host = peer.host_id == me.host_id && !peer.ipc.empty() && transport != "tcp";
  if (!same_host && peer.tcp.empty())
    throw ConfigError("'" + peer.name + "' serves only ipc:// but runs on another host (" + peer.hostname +
                      "); use transport auto or tcp");
  return same_host ? peer.ipc : peer.tcp;
}

}  // namespace distrl::transport::detail

namespace distrl::transport {

void remove_ipc_files_of(int pid) {
  const std::string prefix = "distrl-" + std::to_string(pid) + "-";  // endpoints_to_bind's names
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/tmp", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path().extension() == ".ipc") std::filesystem::remove(e.path(), ec);
  }
}

}  // namespace distrl::transport
