// The links of one process in a world, chosen per pair of peers: the factory RPC and the process
// group each build their link with. Both links a transport may use are made and bound before
// the addresses are published (ZeroMQ unless shared memory alone is asked for; shared memory
// under auto and shm, where this process can serve it); once every rank's address is known,
// each pair gets its endpoint (auto: shared memory to a rank on this host that serves it, ZeroMQ
// to the others) and the world gets one link: under auto with both bound, both as a PairLink
// (a rank that restarts on another host, or on this one, finds a link that takes it); else the
// one bound. Private to transport/.
//
//   WorldLinks links(settings, events);               // made and bound: links.me() is our address
//   auto peers = exchange_addresses(store, prefix, rank, world, links.me(), timeout);
//   auto endpoints = links.endpoints(peers);          // one per rank, chosen per pair
//   std::unique_ptr<Link> link = links.take(endpoints, events);
//   link->set_peers(endpoints);  link->start();
//
// Lifetime: the caller owns ipc_path()'s file once take() has run (it removes it at shutdown).
// Not thread-safe; used by the thread that starts the world.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/link/endpoints.h"
#include "transport/link/io_loop.h"
#include "transport/link/link.h"
#include "transport/link/shm/shm_link.h"

namespace distrl::transport::detail {

struct LinkSettings {
  std::string what = "rpc";  // who the links are for, in log lines and errors ("rpc", "process group")
  std::string name;          // the process's, as published (and in the log line)
  int rank = 0;
  Transport transport = Transport::Auto;
  std::string bind_ip;  // where ZeroMQ's tcp listens (endpoints.h: bind_ip)
  IoLoop::Options zmq;  // limits, spin, thread_init, member identity
  ShmLink::Options shm;
};

class WorldLinks {
 public:
  // Makes and binds the links settings.transport may use. Under auto, a process that cannot
  // serve shared memory (no /dev/shm room, a file-size limit below a ring) says so and offers
  // ZeroMQ alone; under shm that is a TransportError.
  WorldLinks(LinkSettings settings, const Link::Events& events);

  // Where this process listens, as published at rendezvous.
  const Address& me() const { return me_; }
  // ZeroMQ's ipc socket file ("" without one): a RegisteredPathGuard's until the world starts.
  const std::string& ipc_path() const { return ipc_path_; }
  // The transport the world's link runs under: auto without shared memory here is ZeroMQ's.
  Transport transport() const { return transport_; }
  // Before take(): the world's member key, known once the addresses are (IoLoop's
  // member_identity: the ZeroMQ connections of this process are made as member `rank`'s, and a
  // connection counts as a member's only with that member's tag). nonce: this process's.
  void set_member_key(const std::string& key, std::uint64_t nonce);

  // Each rank's endpoint, chosen per pair. This process's own entry (its calls to itself) takes
  // shared memory only when some other rank does too (or it is alone), so that a process whose
  // peers are all on other hosts keeps ZeroMQ's thread as its link's home. ConfigError naming
  // the worker no link reaches.
  std::vector<std::string> endpoints(const std::vector<Address>& peers) const;
  // The world's link (once): logs which ranks each link reaches (info where the world spans
  // hosts, debug otherwise).
  std::unique_ptr<Link> take(const std::vector<std::string>& endpoints, Link::Events events);

 private:
  LinkSettings settings_;
  std::unique_ptr<Link> zmq_, shm_;
  IoLoop* zmq_loop_ = nullptr;  // zmq_, as its own type
  Address me_;
  std::string ipc_path_;
  Transport transport_;
};

}  // namespace distrl::transport::detail
