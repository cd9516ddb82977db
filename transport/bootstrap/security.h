// Authentication and encryption of every distrl socket behind one switch: ZeroMQ CURVE.
//
// A world is the set of processes that hold its key file (distrl-keygen FILE). With security on,
// every ROUTER (RPC, store, process group) is a CURVE server with the world's key, every DEALER a
// CURVE client that presents the world's key, and a ZAP handler admits only that key: a peer
// without it fails at the handshake, is counted (security_stats) and logged at a bounded rate,
// and never delivers a byte to distrl's code. Traffic is encrypted (Curve25519 + XSalsa20-
// Poly1305, per-connection ephemeral keys). What it does not do: tell members apart (any holder
// of the file is a member), hide that a port is open, or protect the key file itself.
//
// The switch, in the order it is read:
//   - use_security() before the first transport object (the tools call it with their config's
//     `security: curve` and `security_key: FILE`, common/command_line.h);
//   - otherwise the environment: DISTRL_CURVE_KEY=FILE turns CURVE on with that key (distrl-launch
//     sets it for its ranks, so any program it starts is covered).
// The process-wide setting is fixed once the shared ZeroMQ context exists (the first socket).
//
// Thread-safety: every function here may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace distrl::transport {

// A CURVE keypair in Z85 (40 characters each).
struct WorldKey {
  std::string public_z85;
  std::string secret_z85;
};

// A new random keypair (libzmq's zmq_curve_keypair).
WorldKey generate_world_key();
// Writes the key file with mode 0600, atomically; throws OutputError.
void write_world_key(const std::string& path, const WorldKey& key);
// Reads and checks a key file (format, lengths, the public half matches the secret, not readable
// by group or others); throws ConfigError naming the file, what is wrong and how to fix it.
WorldKey read_world_key(const std::string& path);

// Sets this process's security from a tool's configuration: mode "off" or "curve"; key_file the
// world key (empty: $DISTRL_CURVE_KEY). With mode "off" the environment still turns CURVE on when
// it names a key (distrl-launch switches a whole world). Throws ConfigError for an unknown mode,
// curve without a key, a bad key file, or a change once transport objects exist.
void use_security(const std::string& mode, const std::string& key_file);
// The same with a key in memory (benchmarks, tests).
void use_curve(const WorldKey& key);
// True when this process's sockets use CURVE (reads the environment if nothing was set yet).
bool curve_enabled();

struct SecurityStats {
  std::uint64_t handshakes_refused = 0;  // peers that failed the handshake on one of our servers
};
SecurityStats security_stats();

}  // namespace distrl::transport
