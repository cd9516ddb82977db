// Typed run configuration: a tool binds its struct fields to dotted keys ("agent.max_batch"),
// then loads a YAML file and command-line overrides on top of the defaults. Every problem is a
// ConfigError that names the source (file or flag), the key and what is allowed:
//
//   Settings s("distrl-agent");
//   s.bind("agent.max_batch", &cfg.max_batch, "rows per forward pass").range(1, 65536);
//   s.bind("agent.mode", &cfg.mode, "how requests are served").choices({"batched", "unbatched"});
//   s.load_file("configs/cartpole.yaml");   // unknown keys, bad types and ranges throw
//   s.apply_overrides({"--agent.mode=unbatched", "--agent.max_batch", "8"});
//
// Nested YAML maps flatten to dotted keys; lists bind to std::vector<int>/<double>/<string>.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace distrl {

class Settings {
 public:
  // Per-key constraints, chained after bind().
  class Field {
   public:
    Field& range(double lo, double hi);                // numbers (and list items)
    Field& choices(std::vector<std::string> allowed);  // strings
    // strings: a directory the run writes into; check() refuses an empty one, one that is a
    // file, or one under a directory this process cannot write (nothing is created here).
    Field& output_dir();
    const std::string& key() const { return key_; }

   private:
    friend class Settings;
    std::string key_, help_, type_;
    std::function<void(const std::string& text, const std::string& source)> parse_;
    std::function<std::string()> show_;
    double lo_ = 0, hi_ = 0;
    bool ranged_ = false;
    std::vector<std::string> choices_;
    bool output_dir_ = false;
    std::string origin_ = "default";
    bool set_by_old_name_ = false;  // its value came through a rename()d name
    std::string old_name_;
  };

  explicit Settings(std::string tool);
  ~Settings();
  Settings(const Settings&) = delete;
  Settings& operator=(const Settings&) = delete;

  Field& bind(const std::string& key, int* value, const std::string& help);
  Field& bind(const std::string& key, long long* value, const std::string& help);
  Field& bind(const std::string& key, double* value, const std::string& help);
  Field& bind(const std::string& key, bool* value, const std::string& help);
  Field& bind(const std::string& key, std::string* value, const std::string& help);
  Field& bind(const std::string& key, std::vector<int>* value, const std::string& help);

  // Reads a YAML file of nested maps; every leaf must be a bound key.
  void load_file(const std::string& path);
  // The same for YAML text; `source` names it in errors (a file name, "fuzz input").
  void load_text(const std::string& yaml, const std::string& source);
  // "--key=value", "--key value" or "key=value" for bound keys (and "key = value", "key= value",
  // "key =value": the shell's words of what the user meant as one, joined()); anything else is
  // an error that says which keys exist.
  void apply_overrides(const std::vector<std::string>& args);
  // The overrides with "key = value", "key= value" and "key =value" as "key=value".
  static std::vector<std::string> joined(const std::vector<std::string>& args);
  void set(const std::string& key, const std::string& value, const std::string& source);
  bool has(const std::string& key) const;  // bound, or an old name of one
  // old_key is what new_key (bound) was called: still accepted, with a line on stderr saying
  // the new name.
  void rename(const std::string& old_key, const std::string& new_key);
  // The checks that need the final values (output_dir()); after the file and overrides.
  void check() const;
  // The value of the key marked output_dir() ("" when none is).
  std::string output_dir() const;
  // A bound key's current value as text (as to_yaml() writes it); nullopt for a key not bound.
  std::optional<std::string> value(const std::string& key) const;

  // Before anything is bound: the text that a YAML file and overrides ("--key=value", "--key
  // value", "key=value"; the last wins) give `key` -- a section's or a list's as YAML text --
  // or nullopt when neither has it. How a tool of several workloads picks the keys to bind, and
  // distrl-launch the tool to start. ConfigError when the file cannot be read as YAML.
  static std::optional<std::string> peek(const std::string& path, const std::vector<std::string>& overrides,
                                         const std::string& key);
  // The same for many keys: the file is read and parsed once, here (ConfigError as above); the
  // function answers peek's question for any key (thread-safe: it only reads).
  static std::function<std::optional<std::string>(const std::string& key)> peeker(
      const std::string& path, const std::vector<std::string>& overrides);

  // Every key (or those starting with one of `prefixes`) with its current value, type, origin
  // and help (for --help and logs).
  std::string describe(const std::vector<std::string>& prefixes = {}) const;
  // Every bound key, in the order bound (what docs/ must describe: workload_test.cpp).
  std::vector<std::string> keys() const;
  // The effective configuration as YAML (written next to run outputs).
  std::string to_yaml() const;

 private:
  Field& add(const std::string& key, const std::string& help, const std::string& type);
  Field& field(const std::string& key, const std::string& source);
  static void integer_field(Field& f, std::function<void(long long)> store, std::function<std::string()> show);
  // The bound key (or an old name's new one) closest to key, "" when none is close.
  std::string nearest_key(const std::string& key) const;
  // "WHERE: unknown key 'x' (did you mean y?); ...".
  std::string unknown_key(const std::string& key, const std::string& where) const;

  std::string tool_;
  std::vector<std::unique_ptr<Field>> fields_;
  std::map<std::string, Field*> by_key_;
  std::map<std::string, std::string> renamed_;  // old name -> bound key
};

}  // namespace distrl
