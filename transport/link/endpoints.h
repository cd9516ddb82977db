// How a process makes its ROUTER reachable and finds its peers' through the rendezvous store:
// tcp and/or ipc endpoints, and ipc:// between processes on one host. Shared by the RPC agent
// and the process group. Private to transport/.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "transport/bootstrap/rendezvous.h"

namespace distrl::transport::detail {

// One process's addresses, as published in the store.
struct Address {
  std::string name, host_id, hostname, tcp, ipc;
  std::string shm;  // "shm://<socket path>" when it serves shared memory (transport auto or shm)
  // Set by exchange_addresses: the world size it was started with, and which process it is (pid,
  // its pid namespace and start time: a pid alone may be another container's or reused).
  int world = 0;
  int pid = 0;
  std::string process{};
  // The process group's shared-memory collectives (collectives/detail/pg_mesh.h): rank 0's
  // segment address, "shm" on another rank that would use it, empty on one that will not.
  std::string collectives{};
  MSGPACK_DEFINE(name, host_id, hostname, tcp, ipc, shm, world, pid, process, collectives);
};

// The transports a user names, parsed once (parse_transport) and passed on as this enum:
//  - Auto: per pair of peers, shared memory to a peer on this host that serves it, else ZeroMQ
//    (ipc on one host, tcp between hosts). A world that spans hosts runs both at once.
//  - Shm: shared memory to every peer (ConfigError naming a peer on another host).
//  - Zmq: ZeroMQ's auto (ipc to a peer on this host, tcp to the others); Tcp, Ipc: that only.
enum class Transport { Auto, Shm, Zmq, Tcp, Ipc };
// "auto", "shm", "zmq", "tcp", "ipc".
const char* transport_name(Transport t);
// A transport as named (RpcOptions::transport, ProcessGroupOptions::transport): "auto" yields to
// DISTRL_TRANSPORT when that is set (the test suites run once per transport that way).
// ConfigError naming `who` for anything else.
Transport parse_transport(const std::string& transport, const std::string& who);
// What the ZeroMQ side binds for a transport: Zmq (tcp + ipc) for auto and zmq, Ipc for shm
// (ZeroMQ's same-host form, where no shared-memory path exists yet: the process group), else as
// named.
Transport zmq_transport(Transport t);
// The directory this uid's shared-memory sockets live in, `base`/distrl-u<uid>: made 0700 when
// missing; one that is a link, not a directory, another uid's or open to others is refused
// (TransportError naming it and what to do), so no other user can bind or replace a path in it.
std::string private_socket_dir(const std::string& base = "/tmp");
// The Unix socket a shared-memory link listens at ("shm://<private_socket_dir>/distrl-<pid>-<tag>-
// shm-<n>.ipc", removed at exit; remove_ipc_files_of finds those of a killed process).
std::string shm_endpoint_to_bind(const std::string& tag);
// Whether `me` can reach `peer` over shared memory: the same host, and the peer serves it.
bool shm_reachable(const Address& me, const Address& peer);

// Equal on processes of one host: its name, its boot and the network namespace (processes in
// two namespaces of one machine, as containers and the two-host tests run them, count as two
// hosts: between them only tcp is sure to work).
std::string host_id();
// The tcp interface to bind: bind_host if given, else the one that reaches the master.
std::string bind_ip(const WorldSpec& world, const std::string& bind_host);
// transport: Zmq (tcp + ipc), Tcp or Ipc (zmq_transport's answer). The wildcard endpoints to
// bind, tcp first; *ipc_path gets the socket file the caller unlinks when done.
std::vector<std::string> endpoints_to_bind(Transport transport, const std::string& ip, const std::string& tag,
                                           std::string* ipc_path);
// This process's address from the endpoints it bound (same order as endpoints_to_bind).
Address make_address(const std::string& name, Transport transport, const std::vector<std::string>& bound);
// Publishes `me` (with its world size and process) under key_prefix + rank and reads every
// rank's address, waiting up to timeout. Refused, naming both processes (ConfigError):
//  - another world size: each rank compares its own with rank 0's record; the rank that finds a
//    mismatch publishes it (key_prefix + "refused") and every waiting rank refuses with it, all
//    within a slice (500 ms) of each other;
//  - this rank already held by a live process of this host and pid namespace (two processes
//    started as one rank). A holder that is gone is taken over (a restart); one on another host
//    cannot be checked and is taken over too, saying so.
// Store load: about two checks per rank per slice, whatever the world's size. Rank 0 names the
// ranks still missing every 5 s ("waiting for rank 2: 2 of 3 joined, 5 s"), the others how long
// they have waited.
std::vector<Address> exchange_addresses(Store& store, const std::string& key_prefix, int rank, int world, Address me,
                                        std::chrono::milliseconds timeout);
// The endpoint `me` uses to reach `peer` (the choice per pair): its shm endpoint for transport
// shm, and for auto when shm_reachable; else ZeroMQ: ipc on the same host unless transport is
// tcp, tcp otherwise. Throws ConfigError when the peer serves only ipc (or shm) from another host.
std::string endpoint_for(const Address& me, const Address& peer, Transport transport);
// A world's member key: 128 random bits (hex), made by its rank 0 and kept in the store, and
// member `rank`'s tag under it (16 hex digits of a keyed mix): the part of a member's ZeroMQ
// routing id (rpc-r<rank>-<tag>-..., for RPC's link and the process group's alike) that a stranger
// cannot guess, so that naming itself a member does not make it one. Not a MAC against someone
// who reads the routing ids on the wire (with security off nothing is hidden there).
std::string new_member_key();
std::string member_tag(const std::string& key, int rank);
// The world's member key at `key` in the store, after the address exchange: rank 0 makes it
// when it is not there yet (a restarted rank 0 keeps its world's; a duplicate rank 0 was refused
// at the exchange, before it could replace it), every rank reads it (waiting up to timeout).
std::string world_member_key(Store& store, const std::string& key, int rank, std::chrono::milliseconds timeout);

// "0-1, 3": sorted ranks as runs, for the lines that say which ranks a link or a group holds.
std::string rank_ranges(const std::vector<int>& ranks);

}  // namespace distrl::transport::detail
