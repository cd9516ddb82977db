#include "common/settings.h"

#include <yaml-cpp/yaml.h>

#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <iterator>
#include <filesystem>
#include <iostream>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/error.h"

namespace distrl {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

[[noreturn]] void bad_value(const std::string& source, const std::string& key, const std::string& text,
                            const std::string& expected) {
  throw ConfigError(source + ": " + key + ": '" + text + "' is not " + expected);
}

long long parse_integer(const std::string& source, const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno == ERANGE) bad_value(source, key, text, "an integer");
  return v;
}

double parse_number(const std::string& source, const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) bad_value(source, key, text, "a number");
  return v;
}

bool parse_bool(const std::string& source, const std::string& key, const std::string& text) {
  const std::string t = trim(text);
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  bad_value(source, key, text, "a boolean (true or false)");
}

// "[1, 2, 3]" or "1,2,3" -> items; "[]" -> none.
std::vector<std::string> split_list(const std::string& text) {
  std::string t = trim(text);
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  std::vector<std::string> items;
  if (trim(t).empty()) return items;
  std::stringstream ss(t);
  std::string item;
  while (std::getline(ss, item, ',')) items.push_back(trim(item));
  return items;
}

// Whole numbers as integers (100000000, not 1e+08); others as the shortest usual form.
std::string format_number(double v) {
  std::ostringstream os;
  if (v == std::floor(v) && std::abs(v) < 1e18) os << static_cast<long long>(v);
  else {
    // the shortest text that reads back as the same double (0.1, not 0.10000000000000001)
    for (int digits = 6; digits <= 17; ++digits) {
      os.str({});
      os << std::setprecision(digits) << v;
      if (std::strtod(os.str().c_str(), nullptr) == v) break;
    }
  }
  return os.str();
}

// True when s is well-formed UTF-8 (YAML's encoding; what to_yaml() writes back unchanged).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (n < 0 || i + n > s.size() - 1) return false;  // a bad lead byte, or the text ends inside one
    std::uint32_t cp = n == 0 ? c : c & (0x3f >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static const std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;  // overlong, too big, surrogate
    i += n + 1;
  }
  return true;
}

// A leaf of the file: its dotted key, its value as text and its line (1-based).
struct Leaf {
  std::string key, value;
  int line = 0;
};

void flatten(const YAML::Node& node, const std::string& prefix, const std::string& path, std::vector<Leaf>* out,
             int depth = 0) {
  if (node.IsMap()) {
    // No config nests deeper than a few levels; a bound also stops an alias cycle (&a {b: *a}).
    if (depth >= 16) throw ConfigError(path + ": " + prefix + ": maps nested more than 16 deep");
    for (const auto& kv : node) {
      if (!kv.first.IsScalar())
        throw ConfigError(path + ": " + (prefix.empty() ? "the top level" : prefix) +
                          ": a key must be a plain name, not a list or map");
      const std::string key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
      flatten(kv.second, key, path, out, depth + 1);
    }
    return;
  }
  if (node.IsSequence()) {
    std::string joined = "[";
    for (std::size_t i = 0; i < node.size(); ++i) {
      if (!node[i].IsScalar())
        throw ConfigError(path + ": " + prefix + ": lists may only hold plain values (numbers, strings)");
      joined += (i ? "," : "") + node[i].Scalar();
    }
    out->push_back({prefix, joined + "]", node.Mark().line + 1});
    return;
  }
  if (node.IsNull()) throw ConfigError(path + ": " + prefix + ": has no value");
  out->push_back({prefix, node.Scalar(), node.Mark().line + 1});
}

// Edits (insert, delete, substitute) from a to b.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string last_part(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

Settings::Field& Settings::Field::range(double lo, double hi) {
  lo_ = lo;
  hi_ = hi;
  ranged_ = true;
  return *this;
}

Settings::Field& Settings::Field::choices(std::vector<std::string> allowed) {
  choices_ = std::move(allowed);
  return *this;
}

Settings::Field& Settings::Field::output_dir() {
  output_dir_ = true;
  return *this;
}

namespace {

// The name of the kernel's pseudo file system path is on (proc, sysfs, ...), else nullptr: they
// take directories and files as root yet keep nothing (fs::space says 0 bytes free there).
const char* pseudo_file_system(const std::string& path) {
  struct statfs st {};
  if (::statfs(path.c_str(), &st) != 0) return nullptr;
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0x9fa0: return "proc";            // PROC_SUPER_MAGIC
    case 0x62656572: return "sysfs";       // SYSFS_MAGIC
    case 0x1cd1: return "devpts";          // DEVPTS_SUPER_MAGIC
    case 0x27e0eb: return "cgroup";        // CGROUP_SUPER_MAGIC
    case 0x63677270: return "cgroup2";     // CGROUP2_SUPER_MAGIC
    case 0x64626720: return "debugfs";     // DEBUGFS_MAGIC
    case 0x74726163: return "tracefs";     // TRACEFS_MAGIC
    case 0x73636673: return "securityfs";  // SECURITYFS_MAGIC
    case 0xcafe4a11: return "bpf";         // BPF_FS_MAGIC
    default: return nullptr;
  }
}

}  // namespace

void Settings::check() const {
  namespace fs = std::filesystem;
  for (const auto& f : fields_) {
    if (!f->output_dir_) continue;
    const std::string dir = f->show_();
    const std::string where = f->origin_ + ": " + f->key_;
    if (dir.empty()) throw ConfigError(where + " is empty: give the directory the run writes its outputs into");
    std::error_code ec;
    fs::path p = fs::absolute(dir, ec);
    if (ec) throw ConfigError(where + ": '" + dir + "': " + ec.message());
    if (fs::exists(p, ec) && !fs::is_directory(p, ec))
      throw ConfigError(where + ": '" + dir + "' is a file, not a directory (choose another " + f->key_ + ")");
    while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
    if (!fs::is_directory(p, ec))
      throw ConfigError(where + ": '" + dir + "' cannot be created: " + p.string() + " is not a directory");
    if (const char* pseudo = pseudo_file_system(p.string()))
      throw ConfigError(where + ": '" + dir + "' is on " + p.string() + ", a " + pseudo +
                        " file system of the kernel's, which holds no files of a run (choose another " + f->key_ +
                        ", e.g. runs/NAME)");
    struct statvfs vfs {};
    if (::statvfs(p.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0)
      throw ConfigError(where + ": '" + dir + "' cannot be written: " + p.string() +
                        " is on a read-only file system (choose another " + f->key_ + ")");
    if (::access(p.c_str(), W_OK | X_OK) != 0)
      throw ConfigError(where + ": '" + dir + "' cannot be written: " + p.string() + ": " + std::strerror(errno) +
                        " (choose another " + f->key_ + ")");
    // A full disk is an error now, not after every process has started and trained a while.
    constexpr std::uintmax_t kMinFree = 16u << 20;
    const auto space = fs::space(p, ec);
    if (!ec && space.available < kMinFree)
      throw ConfigError(where + ": '" + dir + "': only " + std::to_string(space.available >> 10) + " KiB free on " +
                        p.string() + " (a run needs at least " + std::to_string(kMinFree >> 20) +
                        " MiB for its checkpoints and metrics; free some space or choose another " + f->key_ + ")");
  }
}

std::string Settings::output_dir() const {
  for (const auto& f : fields_)
    if (f->output_dir_) return f->show_();
  return "";
}

std::optional<std::string> Settings::value(const std::string& key) const {
  const auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second->show_();
}

Settings::Settings(std::string tool) : tool_(std::move(tool)) {}
Settings::~Settings() = default;

Settings::Field& Settings::add(const std::string& key, const std::string& help, const std::string& type) {
  if (by_key_.count(key)) throw Error("Settings: key '" + key + "' bound twice");
  fields_.push_back(std::make_unique<Field>());
  Field& f = *fields_.back();
  f.key_ = key;
  f.help_ = help;
  f.type_ = type;
  by_key_[key] = &f;
  return f;
}

namespace {
// Range check shared by every numeric binding.
void check_range(const Settings::Field& f, bool ranged, double lo, double hi, double v, const std::string& source,
                 const std::string& text) {
  if (ranged && (v < lo || v > hi))
    throw ConfigError(source + ": " + f.key() + ": " + text + " is out of range [" + format_number(lo) + ", " +
                      format_number(hi) + "]");
}
}  // namespace

void Settings::integer_field(Field& f, std::function<void(long long)> store, std::function<std::string()> show) {
  Field* fp = &f;
  f.parse_ = [fp, store](const std::string& text, const std::string& source) {
    long long v = parse_integer(source, fp->key_, text);
    check_range(*fp, fp->ranged_, fp->lo_, fp->hi_, static_cast<double>(v), source, text);
    store(v);
  };
  f.show_ = std::move(show);
}

Settings::Field& Settings::bind(const std::string& key, int* value, const std::string& help) {
  Field& f = add(key, help, "int");
  f.range(-2147483648.0, 2147483647.0);
  integer_field(
      f, [value](long long v) { *value = static_cast<int>(v); }, [value] { return std::to_string(*value); });
  return f;
}

Settings::Field& Settings::bind(const std::string& key, long long* value, const std::string& help) {
  Field& f = add(key, help, "int");
  integer_field(
      f, [value](long long v) { *value = v; }, [value] { return std::to_string(*value); });
  return f;
}

Settings::Field& Settings::bind(const std::string& key, double* value, const std::string& help) {
  Field& f = add(key, help, "number");
  Field* fp = &f;
  f.parse_ = [fp, value](const std::string& text, const std::string& source) {
    double v = parse_number(source, fp->key_, text);
    check_range(*fp, fp->ranged_, fp->lo_, fp->hi_, v, source, text);
    *value = v;
  };
  f.show_ = [value] { return format_number(*value); };
  return f;
}

Settings::Field& Settings::bind(const std::string& key, bool* value, const std::string& help) {
  Field& f = add(key, help, "bool");
  Field* fp = &f;
  f.parse_ = [fp, value](const std::string& text, const std::string& source) {
    *value = parse_bool(source, fp->key_, text);
  };
  f.show_ = [value] { return std::string(*value ? "true" : "false"); };
  return f;
}

Settings::Field& Settings::bind(const std::string& key, std::string* value, const std::string& help) {
  Field& f = add(key, help, "string");
  Field* fp = &f;
  f.parse_ = [fp, value](const std::string& text, const std::string& source) {
    const std::string t = trim(text);
    for (unsigned char c : t)
      if (c < 0x20 && c != '\t')
        throw ConfigError(source + ": " + fp->key_ + ": the value holds a control character (byte " +
                          std::to_string(c) + "); write it on one line, without NUL or escape bytes");
    if (!valid_utf8(t)) throw ConfigError(source + ": " + fp->key_ + ": the value is not valid UTF-8 text");
    if (!fp->choices_.empty()) {
      bool ok = false;
      std::string allowed;
      for (const auto& c : fp->choices_) {
        ok = ok || c == t;
        allowed += (allowed.empty() ? "" : ", ") + c;
      }
      if (!ok) throw ConfigError(source + ": " + fp->key_ + ": '" + t + "' is not one of: " + allowed);
    }
    *value = t;
  };
  f.show_ = [value] { return *value; };
  return f;
}

Settings::Field& Settings::bind(const std::string& key, std::vector<int>* value, const std::string& help) {
  Field& f = add(key, help, "int list");
  Field* fp = &f;
  f.parse_ = [fp, value](const std::string& text, const std::string& source) {
    std::vector<int> out;
    for (const auto& item : split_list(text)) {
      long long v = parse_integer(source, fp->key_, item);
      check_range(*fp, fp->ranged_, fp->lo_, fp->hi_, static_cast<double>(v), source, item);
      out.push_back(static_cast<int>(v));
    }
    *value = std::move(out);
  };
  f.show_ = [value] {
    std::string s = "[";
    for (std::size_t i = 0; i < value->size(); ++i) s += (i ? ", " : "") + std::to_string((*value)[i]);
    return s + "]";
  };
  return f;
}

std::string Settings::nearest_key(const std::string& key) const {
  // How long a run is has a name per workload: another workload's name means this one's.
  static const char* const kRunLength[] = {"learner.rounds", "learner.episodes", "train.rounds",
                                           "train.epochs",   "train.steps",      "train.batches"};
  if (std::find(std::begin(kRunLength), std::end(kRunLength), key) != std::end(kRunLength)) {
    std::string mine;
    for (const char* k : kRunLength)
      if (by_key_.count(k)) mine += (mine.empty() ? "" : " or ") + std::string(k);
    if (!mine.empty()) return mine;
  }
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& f : fields_) {
    std::size_t d = edit_distance(key, f->key_);
    if (last_part(key) == last_part(f->key_)) d = std::min<std::size_t>(d, 1);  // right name, wrong section
    if (d < best_d) best_d = d, best = f->key_;
  }
  for (const auto& [old_key, new_key] : renamed_) {
    const std::size_t d = edit_distance(key, old_key);
    if (d < best_d) best_d = d, best = new_key;
  }
  return best_d <= std::max<std::size_t>(2, key.size() / 4) ? best : "";
}

std::string Settings::unknown_key(const std::string& key, const std::string& where) const {
  const std::string near = nearest_key(key);
  return where + ": unknown key '" + key + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") + "; " + tool_ +
         " --config FILE --help lists the keys of that file's workload (" + std::to_string(fields_.size()) + " keys)";
}

void Settings::rename(const std::string& old_key, const std::string& new_key) {
  DISTRL_CHECK(by_key_.count(new_key) && !by_key_.count(old_key), "Settings::rename: " + old_key + " -> " + new_key);
  renamed_[old_key] = new_key;
}

Settings::Field& Settings::field(const std::string& key, const std::string& source) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    const auto renamed = renamed_.find(key);
    if (renamed == renamed_.end()) throw ConfigError(unknown_key(key, source));
    // Once per run: a launched world's ranks all read the same config, and rank 0 speaks for it.
    const char* rank = std::getenv("RANK");
    if (rank == nullptr || std::string(rank) == "0")
      std::cerr << tool_ << ": " << source << ": " << key << " is called " << renamed->second
                << " now; the old name still works (rename it to silence this line)\n";
    it = by_key_.find(renamed->second);
  }
  return *it->second;
}

bool Settings::has(const std::string& key) const { return by_key_.count(key) != 0 || renamed_.count(key) != 0; }

void Settings::set(const std::string& key, const std::string& value, const std::string& source) {
  Field& f = field(key, source);
  // One source giving a key under both its names: which was meant is not ours to guess.
  const bool old_name = key != f.key_;
  if (f.origin_ == source && (old_name || f.set_by_old_name_))
    throw ConfigError(source + ": " + f.key_ + " is given twice, once by its old name (" +
                      (old_name ? key : f.old_name_) + "): keep " + f.key_ + " only");
  f.parse_(value, source);
  f.origin_ = source;
  f.set_by_old_name_ = old_name;
  if (old_name) f.old_name_ = key;
}

namespace {

std::string read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot read the config file");
  return text.str();
}

YAML::Node parse_yaml(const std::string& yaml, const std::string& source) {
  try {
    return YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": not valid YAML: " + e.what());
  }
}

}  // namespace

void Settings::load_file(const std::string& path) { load_text(read_config_file(path), path); }

std::optional<std::string> Settings::peek(const std::string& path, const std::vector<std::string>& given,
                                          const std::string& key) {
  return peeker(path, given)(key);
}

std::function<std::optional<std::string>(const std::string& key)> Settings::peeker(
    const std::string& path, const std::vector<std::string>& given) {
  auto root = std::make_shared<const YAML::Node>(parse_yaml(read_config_file(path), path));
  auto overrides = std::make_shared<const std::vector<std::string>>(joined(given));
  return [root, overrides](const std::string& key) {
    std::optional<std::string> value;
    YAML::Node n = *root;  // shares the tree; looked up through const nodes only, which add nothing to it
    std::size_t start = 0;
    for (;;) {
      const auto dot = key.find('.', start);
      const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const YAML::Node child = n.IsMap() ? static_cast<const YAML::Node&>(n)[part] : YAML::Node();
      if (!n.IsMap() || !child) {
        n.reset();
        break;
      }
      n.reset(child);  // rebinds; `n = child` would overwrite the node n shares with the root
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (n.IsDefined() && !n.IsNull()) value = n.IsScalar() ? n.Scalar() : YAML::Dump(n);
    const std::vector<std::string>& o = *overrides;
    for (std::size_t i = 0; i < o.size(); ++i) {
      const std::string& a = o[i];
      if (a.rfind("--" + key + "=", 0) == 0) value = a.substr(key.size() + 3);
      else if (a.rfind(key + "=", 0) == 0) value = a.substr(key.size() + 1);
      else if (a == "--" + key && i + 1 < o.size()) value = o[i + 1];
    }
    return value;
  };
}

void Settings::load_text(const std::string& yaml, const std::string& source) {
  const YAML::Node root = parse_yaml(yaml, source);
  if (root.IsNull())  // an empty file ran CartPole with every default, silently
    throw ConfigError(source +
                      ": the file holds no keys; a run's file names what it runs (start from one under "
                      "configs/, e.g. configs/cartpole.yaml)");
  if (!root.IsMap()) throw ConfigError(source + ": the top level must be a map of keys");
  std::vector<Leaf> leaves;
  flatten(root, "", source, &leaves);
  for (const auto& leaf : leaves) {
    if (!has(leaf.key)) throw ConfigError(unknown_key(leaf.key, source + ":" + std::to_string(leaf.line)));
    set(leaf.key, leaf.value, source);
  }
}

std::vector<std::string> Settings::joined(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  auto plain = [](const std::string& a) { return !a.empty() && a.rfind("-", 0) != 0; };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_eq = a.find('=') != std::string::npos;
    const bool next = i + 1 < args.size();
    if (plain(a) && !has_eq && next && args[i + 1] == "=" && i + 2 < args.size()) {  // key = value
      out.push_back(a + "=" + args[i + 2]);
      i += 2;
    } else if (plain(a) && !has_eq && next && args[i + 1].size() > 1 && args[i + 1][0] == '=') {  // key =value
      out.push_back(a + args[i + 1]);
      ++i;
    } else if (plain(a) && a.back() == '=' && a.find('=') == a.size() - 1 && next && plain(args[i + 1]) &&
               args[i + 1].find('=') == std::string::npos) {  // key= value
      out.push_back(a + args[i + 1]);
      ++i;
    } else {
      out.push_back(a);
    }
  }
  return out;
}

void Settings::apply_overrides(const std::vector<std::string>& given) {
  const std::vector<std::string> args = joined(given);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    const bool dashed = a.rfind("--", 0) == 0;
    if (dashed) a = a.substr(2);
    const auto eq = a.find('=');
    std::string key = eq == std::string::npos ? a : a.substr(0, eq);
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (dashed && has(key) && i + 1 < args.size()) {
      value = args[++i];
    } else if (dashed && has(key)) {
      throw ConfigError("command line: '" + args[i] + "' needs a value (--" + key + " VALUE or " + key + "=VALUE)");
    } else {
      const std::string near = nearest_key(key);
      throw ConfigError("command line: '" + args[i] + "' is not a known option or KEY=VALUE override" +
                        (near.empty() ? "" : " (did you mean " + near + "?)") + "; see " + tool_ + " --help");
    }
    set(key, value, "command line");
  }
}

std::vector<std::string> Settings::keys() const {
  std::vector<std::string> out;
  for (const auto& f : fields_) out.push_back(f->key_);
  return out;
}

std::string Settings::describe(const std::vector<std::string>& prefixes) const {
  const auto shown = [&](const Field& f) {
    if (prefixes.empty()) return true;
    for (const auto& p : prefixes)
      if (f.key_.rfind(p, 0) == 0) return true;
    return false;
  };
  std::ostringstream os;
  std::size_t width = 0;
  for (const auto& f : fields_)
    if (shown(*f)) width = std::max(width, f->key_.size());
  for (const auto& f : fields_) {
    if (!shown(*f)) continue;
    os << "  --" << f->key_ << std::string(width - f->key_.size() + 2, ' ') << f->help_ << " [" << f->type_;
    if (!f->choices_.empty()) {
      os << ": ";
      for (std::size_t i = 0; i < f->choices_.size(); ++i) os << (i ? "|" : "") << f->choices_[i];
    }
    os << ", " << f->show_() << "]\n";
  }
  return os.str();
}

std::string Settings::to_yaml() const {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& f : fields_) {
    std::vector<std::string> parts;
    std::stringstream ss(f->key_);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    YAML::Node node(root);  // a handle: reset() moves it down, creating maps as needed
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node next = node[parts[i]];
      node.reset(next);
    }
    // A string is written as a string (quoted where YAML needs it: "a: b", "#1", "true");
    // numbers, bools and lists are written as their YAML text.
    if (f->type_ == "string") node[parts.back()] = YAML::Node(f->show_());
    else node[parts.back()] = YAML::Load(f->show_());
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace distrl
