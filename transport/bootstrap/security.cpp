#include "transport/bootstrap/security.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <zmq_addon.hpp>

#include "common/error.h"
#include "common/log.h"
#include "common/output_file.h"
#include "common/thread_name.h"
#include "transport/zmq/zmq_context.h"

namespace distrl::transport {
namespace {

constexpr const char* kKeyEnv = "DISTRL_CURVE_KEY";
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by ZeroMQ's RFC 27
constexpr int kHandshakeEvents = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_MONITOR_STOPPED;

// The process-wide setting: unset (read the environment at first use), off, or a key.
struct Setting {
  std::mutex mu;
  bool decided = false;
  std::optional<WorldKey> key;
  bool frozen = false;  // a context was created under it
};
Setting& setting() {
  static Setting s;
  return s;
}

std::atomic<std::uint64_t> g_refused{0};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\"'");
  const auto e = s.find_last_not_of(" \t\r\"'");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Decides from the environment if nothing decided yet. Caller holds mu.
void decide_locked(Setting& s) {
  if (s.decided) return;
  s.decided = true;
  const char* env = std::getenv(kKeyEnv);
  if (env && *env) s.key = read_world_key(env);
}

void set_key(std::optional<WorldKey> key) {
  auto& s = setting();
  std::lock_guard<std::mutex> lock(s.mu);
  const bool same = s.decided && s.key.has_value() == key.has_value() &&
                    (!key || (s.key->public_z85 == key->public_z85 && s.key->secret_z85 == key->secret_z85));
  if (s.frozen && !same)
    throw ConfigError(
        "security: the setting cannot change once transport objects exist (set it before the first "
        "RpcAgent, Store or ProcessGroup)");
  s.decided = true;
  s.key = std::move(key);
}

}  // namespace

WorldKey generate_world_key() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw TransportError(std::string("security: cannot make a CURVE keypair: ") + zmq_strerror(zmq_errno()) +
                         " (this libzmq was built without CURVE)");
  return WorldKey{pub, sec};
}

void write_world_key(const std::string& path, const WorldKey& key) {
  std::ostringstream os;
  os << "# distrl world key (ZeroMQ CURVE), made by distrl-keygen. Whoever can read this file can join\n"
        "# the world: keep it mode 0600 and copy it to the other hosts over a secure channel (scp).\n"
     << "public = " << key.public_z85 << "\nsecret = " << key.secret_z85 << "\n";
  write_file_atomically(path, os.str(), 0600);
}

WorldKey read_world_key(const std::string& path) {
  const std::string fix = " (make one: distrl-keygen " + path + ")";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw ConfigError("security key '" + path + "': " + std::strerror(errno) + fix);
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw ConfigError("security key '" + path + "' is readable by other users; it is a secret (chmod 600 " + path +
                      ")");
  std::ifstream in(path);
  if (!in) throw ConfigError("security key '" + path + "': cannot read it");
  WorldKey k;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      throw ConfigError("security key '" + path + "': '" + line + "' is not 'name = value'" + fix);
    const std::string name = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (name == "public") k.public_z85 = value;
    else if (name == "secret") k.secret_z85 = value;
    else throw ConfigError("security key '" + path + "': unknown entry '" + name + "' (known: public, secret)");
  }
  if (k.public_z85.size() != 40 || k.secret_z85.size() != 40)
    throw ConfigError("security key '" + path + "' needs 'public = ' and 'secret = ' with 40 Z85 characters each" +
                      fix);
  char derived[41];
  if (zmq_curve_public(derived, k.secret_z85.c_str()) != 0 || k.public_z85 != derived)
    throw ConfigError("security key '" + path +
                      "': the public key does not belong to the secret key (a damaged file?)" + fix);
  return k;
}

void use_security(const std::string& mode, const std::string& key_file) {
  if (mode != "off" && mode != "curve") throw ConfigError("security: '" + mode + "' is not known (known: off, curve)");
  std::string file = key_file;
  if (const char* env = std::getenv(kKeyEnv); file.empty() && env && *env) file = env;
  if (mode == "off" && key_file.empty()) {  // off, unless distrl-launch switched the whole world on
    set_key(file.empty() ? std::nullopt : std::optional<WorldKey>(read_world_key(file)));
    return;
  }
  if (file.empty())
    throw ConfigError(
        "security: curve needs a key: set security_key: FILE (make one: distrl-keygen FILE), or run "
        "under distrl-launch, which makes one for its ranks");
  set_key(read_world_key(file));
}

void use_curve(const WorldKey& key) { set_key(key); }

bool curve_enabled() {
  auto& s = setting();
  std::lock_guard<std::mutex> lock(s.mu);
  decide_locked(s);
  return s.key.has_value();
}

SecurityStats security_stats() { return SecurityStats{g_refused.load()}; }

namespace detail {

// The ZAP handler (admits clients that present the world's public key) and the handshake
// monitors of every CURVE server socket (counts and logs the refused), on one thread.
class SecurityGuard {
 public:
  SecurityGuard(zmq::context_t& ctx, WorldKey key) : key_(std::move(key)), zap_(ctx, zmq::socket_type::rep) {
    client_key_.resize(32);
    zmq_z85_decode(reinterpret_cast<std::uint8_t*>(&client_key_[0]), key_.public_z85.c_str());
    zap_.set(zmq::sockopt::linger, 0);
    zap_.bind(kZapEndpoint);  // before any server socket exists: none handshakes unguarded
    thread_ = std::thread([this] {
      name_this_thread("distrl-zap");
      run();
    });
  }
  // The context must be shut down first: that ends the thread's poll with ETERM.
  ~SecurityGuard() {
    if (thread_.joinable()) thread_.join();
  }

  const WorldKey& key() const { return key_; }

  void watch(zmq::context_t& ctx, zmq::socket_t& server) {
    const std::string ep = "inproc://distrl-handshakes-" + std::to_string(++watched_);
    if (zmq_socket_monitor(server.handle(), ep.c_str(), kHandshakeEvents) != 0)
      throw TransportError("security: cannot monitor a server socket's handshakes");
    zmq::socket_t mon(ctx, zmq::socket_type::pair);
    mon.set(zmq::sockopt::linger, 0);
    mon.connect(ep);
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(mon));  // handed to the guard's thread (a full barrier: the mutex)
  }

 private:
  void run() {
    std::vector<zmq::socket_t> monitors;
    try {
      for (;;) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (auto& m : pending_) monitors.push_back(std::move(m));
          pending_.clear();
        }
        std::vector<zmq::pollitem_t> items{{zap_.handle(), 0, ZMQ_POLLIN, 0}};
        for (auto& m : monitors) items.push_back({m.handle(), 0, ZMQ_POLLIN, 0});
        poll_nointr(items.data(), items.size(), std::chrono::milliseconds(100));
        if (items[0].revents & ZMQ_POLLIN) answer();
        for (std::size_t i = monitors.size(); i-- > 0;)
          if ((items[i + 1].revents & ZMQ_POLLIN) && !read_events(monitors[i])) monitors.erase(monitors.begin() + i);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() != ETERM) DISTRL_LOG(Error, "security: the handshake guard stopped: " << e.what());
    }
    for (auto& m : monitors) m.close();
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();
    zap_.close();
  }

  // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
  void answer() {
    std::vector<zmq::message_t> req;
    if (!recv_multipart_nointr(zap_, req, zmq::recv_flags::dontwait)) return;
    const bool ok = req.size() >= 7 && req[5].to_string() == "CURVE" && req[6].to_string() == client_key_;
    std::vector<zmq::message_t> rep;
    rep.emplace_back(std::string("1.0"));
    rep.emplace_back(req.size() > 1 ? req[1].to_string() : std::string());
    rep.emplace_back(std::string(ok ? "200" : "400"));
    rep.emplace_back(std::string(ok ? "OK" : "not the world's key"));
    rep.emplace_back(std::string());
    rep.emplace_back(std::string());
    send_multipart_nointr(zap_, rep, zmq::send_flags::none);
    if (!ok && req.size() > 3) last_address_ = req[3].to_string();
  }

  // False once the monitored socket is gone.
  bool read_events(zmq::socket_t& mon) {
    for (;;) {
      std::vector<zmq::message_t> ev;
      if (!recv_multipart_nointr(mon, ev, zmq::recv_flags::dontwait)) return true;
      if (ev.size() < 2 || ev[0].size() < 6) continue;
      std::uint16_t event;
      std::memcpy(&event, ev[0].data(), sizeof(event));
      if (event == ZMQ_EVENT_MONITOR_STOPPED) {
        mon.close();
        return false;
      }
      g_refused.fetch_add(1);
      long held = 0;
      if (limiter_.allow(&held))
        DISTRL_LOG(Warn, "security: refused a peer without the world's key on "
                             << ev[1].to_string()
                             << (last_address_.empty() ? "" : " (last one from " + last_address_ + ")")
                             << (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? ": it does not speak CURVE" : "")
                             << (held ? " (+" + std::to_string(held) + " more not shown)" : ""));
    }
  }

  WorldKey key_;
  std::string client_key_;  // 32 bytes: what an admitted client presents
  zmq::socket_t zap_;
  std::mutex mu_;
  std::vector<zmq::socket_t> pending_;
  std::atomic<int> watched_{0};
  std::string last_address_;  // guard thread only
  RateLimiter limiter_{std::chrono::seconds(5)};
  std::thread thread_;
};

namespace {
std::mutex g_guard_mu;
SecurityGuard* g_guard = nullptr;  // the live context's guard, if any
}  // namespace

std::shared_ptr<SecurityGuard> start_security(zmq::context_t& ctx) {
  auto& s = setting();
  std::optional<WorldKey> key;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    decide_locked(s);
    s.frozen = true;
    key = s.key;
  }
  if (!key) return nullptr;
  auto* g = new SecurityGuard(ctx, *key);
  {
    std::lock_guard<std::mutex> lock(g_guard_mu);
    g_guard = g;
  }
  return std::shared_ptr<SecurityGuard>(g, [](SecurityGuard* p) {
    {
      std::lock_guard<std::mutex> lock(g_guard_mu);
      if (g_guard == p) g_guard = nullptr;
    }
    delete p;
  });
}

void secure_server(zmq::context_t& ctx, zmq::socket_t& s) {
  std::lock_guard<std::mutex> lock(g_guard_mu);
  if (!g_guard) return;
  s.set(zmq::sockopt::curve_server, 1);
  s.set(zmq::sockopt::curve_secretkey, g_guard->key().secret_z85);
  s.set(zmq::sockopt::zap_domain, "distrl");
  g_guard->watch(ctx, s);
}

void secure_client(zmq::socket_t& s) {
  std::lock_guard<std::mutex> lock(g_guard_mu);
  if (!g_guard) return;
  s.set(zmq::sockopt::curve_serverkey, g_guard->key().public_z85);
  s.set(zmq::sockopt::curve_publickey, g_guard->key().public_z85);
  s.set(zmq::sockopt::curve_secretkey, g_guard->key().secret_z85);
}

}  // namespace detail
}  // namespace distrl::transport
