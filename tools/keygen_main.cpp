// distrl-keygen: make a world key for `security: curve` (transport/bootstrap/security.h).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>

#include "common/error.h"
#include "common/main_guard.h"
#include "transport/bootstrap/security.h"

int main(int argc, char** argv) {
  std::string path;
  bool force = false;
  CLI::App app{
      "distrl-keygen: write a new world key (a ZeroMQ CURVE keypair) to FILE, readable only by you.\n"
      "Every process of a world with security: curve needs the same key: copy FILE to each host\n"
      "over a secure channel (scp) and set security_key: FILE, or pass --security-key FILE to\n"
      "distrl-launch. One host only? distrl-launch --security curve makes a key for its run."};
  app.add_option("FILE", path, "where to write the key (mode 0600)")->required();
  app.add_flag("--force", force, "replace an existing FILE (the world's old key stops working)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "distrl-keygen: command line: " << e.what() << " (see --help)\n";
    return 2;
  }
  return distrl::guarded_main("distrl-keygen", [&] {
    if (!force && std::filesystem::exists(path))
      throw distrl::ConfigError("'" + path + "' exists; pass --force to replace it (the old key stops working)");
    const auto key = distrl::transport::generate_world_key();
    distrl::transport::write_world_key(path, key);
    std::cout << "wrote " << path << " (public key " << key.public_z85 << ")\n"
              << "use it: security: curve and security_key: " << path << " in the config, or\n"
              << "        distrl-launch --security curve --security-key " << path << " ...\n";
    return 0;
  });
}
