// Command-line plumbing shared by the tools that read a YAML run configuration (distrl-agent,
// distrl-observer, distrl-train): where to find the world (--rank, --world-size,
// --master-addr, --master-port, --init-method), --config FILE, --resume, --check-config, and
// KEY=VALUE / --key value overrides of any config key.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/run_dir.h"
#include "common/settings.h"

namespace distrl {

// Where a process finds the others. Unset values come from the environment (distrl-launch,
// torchrun, SLURM and Open MPI variables).
struct WorldFlags {
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = 0;
  std::string init_method = "env://";

  // --master-addr/--master-port as tcp://, else init_method. Throws ConfigError for half a pair.
  std::string resolved_init_method() const {
    if (master_addr.empty() && master_port == 0) return init_method;
    if (master_addr.empty() || master_port <= 0)
      throw ConfigError("--master-addr and --master-port go together (got '" + master_addr + "' and " +
                        std::to_string(master_port) + ")");
    return "tcp://" + master_addr + ":" + std::to_string(master_port);
  }
};

struct ToolFlags {
  std::string config;
  WorldFlags world;
  std::string resume;       // continue from this checkpoint
  bool check_only = false;  // validate the configuration and exit
  bool force = false;       // --force: move a finished run's outputs aside (DISTRL_RUN_LOCK_FORCE=1)
  // The config keys `security` (off|curve) and `security_key` (FILE): the tool passes them to
  // transport::use_security before it starts its transport.
  std::string security = "off";
  std::string security_key;
};

// A tool's whole command line: flags, then the config file, then KEY=VALUE overrides of the keys
// bound into `settings` before parse() (CommandLine<Config> binds a struct; a tool of several
// workloads binds the one its file names: training/workload.h). Single-threaded.
class ToolCommandLine {
 public:
  ToolCommandLine(const std::string& tool, const std::string& description, const std::string& example_config,
                  const std::string& resume_help)
      : settings(tool), app(description), tool_name_(tool) {
    app.add_option("--config", flags.config, "YAML run configuration (" + example_config + ")")
        ->check(CLI::ExistingFile);
    app.add_option("--rank", flags.world.rank, "this process's rank (default: $RANK)");
    app.add_option("--world-size", flags.world.world_size, "processes in the run (default: $WORLD_SIZE)");
    app.add_option("--master-addr", flags.world.master_addr, "host of rank 0 (with --master-port: tcp:// rendezvous)");
    app.add_option("--master-port", flags.world.master_port, "rendezvous port on rank 0's host")
        ->check(CLI::Range(1, 65535));
    app.add_option("--init-method", flags.world.init_method, "env://, tcp://HOST:PORT or file:///PATH");
    app.add_option("--resume", flags.resume, resume_help);
    app.add_flag("--check-config", flags.check_only,
                 "validate the configuration, print what would run (\"ok: ...\") and exit");
    app.add_flag("--force", flags.force,
                 "a new run in a run.out_dir that holds a finished run's outputs: move them aside into "
                 "OUT_DIR/previous/ first (common/run_dir.h)");
    app.allow_extras();
  }

  // Returns false after printing --help. Throws ConfigError for bad flags, keys or values.
  bool parse(int argc, char** argv) {
    bind_security();
    // --help with --config shows the file's values (a ps config's 5 trainers, not the default 2).
    std::string shown = "defaults";
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
        const auto [file, overrides] = config_and_overrides(argc, argv);
        try {
          if (!file.empty()) settings.load_file(file), shown = file + "'s values, else the defaults";
        } catch (const ConfigError&) {  // the run itself says what is wrong with the file
        }
        break;
      }
    app.footer(help_keys.empty()
                   ? "Config keys (in the YAML file as nested maps, or here as --key value / key=value; shown: " +
                         shown + "):\n" + settings.describe()
                   : "Config keys this tool reads (the file may hold the others; " + help_keys_note +
                         "; shown: " + shown + "):\n" + settings.describe(help_keys));
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();
      return false;
    } catch (const CLI::ParseError& e) {
      throw ConfigError(std::string("command line: ") + e.what() + " (see --help)");
    }
    if (flags.force) ::setenv("DISTRL_RUN_LOCK_FORCE", "1", 1);  // read where run.out_dir is claimed
    if (!flags.config.empty()) settings.load_file(flags.config);
    settings.apply_overrides(app.remaining());
    settings.check();
    ThisRun& run = this_run();
    run.resume = !flags.resume.empty();
    run.check_only = flags.check_only;
    run.started = std::filesystem::file_time_type::clock::now();
    if (const char* id = std::getenv("DISTRL_RUN_ID")) run.run = id;  // distrl-launch's claim made it
    remember_command(tool_name_, flags.config, app.remaining());      // for resume_command's hint
    return true;
  }

  // Before parse(): the --config file argv names ("" when none) and the arguments left for
  // overrides, for a tool that picks its keys by them. Nothing is checked here (parse() does).
  static std::pair<std::string, std::vector<std::string>> config_and_overrides(int argc, char** argv) {
    CLI::App scan;
    scan.set_help_flag();
    std::string config;
    scan.add_option("--config", config);
    scan.allow_extras();
    try {
      scan.parse(argc, argv);
    } catch (const CLI::ParseError&) {
      return {};
    }
    return {config, scan.remaining()};
  }

  Settings settings;
  ToolFlags flags;
  CLI::App app;
  // When set before parse(): --help lists only the keys starting with these, and says why.
  std::vector<std::string> help_keys;
  std::string help_keys_note;

 private:
  std::string tool_name_;
  // The world's security: after the config's own keys, as every tool lists them.
  void bind_security() {
    if (settings.has("security")) return;
    settings
        .bind("security", &flags.security,
              "off: plain sockets (fine on one host); curve: every socket authenticated and encrypted with "
              "ZeroMQ CURVE (needed across hosts; docs/security.md)")
        .choices({"off", "curve"});
    settings.bind("security_key", &flags.security_key,
                  "the world's key file for security: curve (make one: distrl-keygen FILE; empty: "
                  "$DISTRL_CURVE_KEY, which distrl-launch sets)");
  }
};

// The command line of a tool with one config struct: Config has a `void bind(Settings&, Config&)`
// found by argument-dependent lookup.
template <typename Config>
class CommandLine : public ToolCommandLine {
 public:
  CommandLine(const std::string& tool, const std::string& description, const std::string& example_config,
              const std::string& resume_help)
      : ToolCommandLine(tool, description, example_config, resume_help) {
    bind(settings, config);
  }

  Config config;
};

}  // namespace distrl
