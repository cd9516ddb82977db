#include "transport/detail/endpoints.h"
#include "transport/rendezvous.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/error.h"

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
    eps.push_back("ipc://" + *ipc_path);
  }
  return eps;
}

Address make_address(const std::string& name, const std::string& transport, const std::vector<std::string>& bound) {
  return Address{name, host_id(), hostname(), transport != "ipc" ? bound.at(0) : "",
                 transport != "tcp" ? bound.back() : "", ""};
}

std::vector<Address> exchange_addresses(Store& store, const std::string& key_prefix, int rank, int world,
                                        const Address& me, std::chrono::milliseconds timeout) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, me);
  store.set(key_prefix + std::to_string(rank), std::string(buf.data(), buf.size()));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key_prefix + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int r = 0; r < world; ++r)
      if (!store.check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    throw TimeoutError("rendezvous: rank(s) " + missing + " of world size " + std::to_string(world) +
                       " did not join within " + std::to_string(timeout.count()) +
                       " ms (started? same world size and master address?)");
  }
  std::vector<Address> out(world);
  // An address record is a few strings: limits keep a forged record from asking for gigabytes.
  const msgpack::unpack_limit limits(64, 64, 4096, 4096, 64, 8);
  for (int r = 0; r < world; ++r) {
    const std::string raw = store.get(keys[r]);
    try {
      std::size_t off = 0;
      msgpack::unpack(raw.data(), raw.size(), off, nullptr, nullptr, limits).get().convert(out[r]);
    } catch (const std::exception& e) {
      throw ProtocolError("rendezvous: the address record of rank " + std::to_string(r) + " is malformed: " + e.what());
    }
  }
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
