#include "common/failpoint.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace distrl {
namespace {

struct Armed {
  long at = 1;    // fires at this hit
  long hits = 0;  // hits so far
};

struct Points {
  std::mutex mu;
  std::map<std::string, Armed> armed;
};

long parse_number(const std::string& item, const std::string& text, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0)
    throw ConfigError("DISTRL_FAILPOINTS: '" + item + "' has a bad " + what + " '" + text +
                      "' (name[@hit][#rank], e.g. ps.client.resend@3#2)");
  return v;
}

// Parses DISTRL_FAILPOINTS once; null when no point can fire in this process.
Points* load() {
  const char* spec = std::getenv("DISTRL_FAILPOINTS");
  if (!spec || !*spec) return nullptr;
  const char* restart = std::getenv("DISTRL_RESTART_COUNT");
  if (restart && *restart && std::string(restart) != "0") return nullptr;
  const char* rank_env = std::getenv("RANK");
  auto* p = new Points;  // lives as long as the process: points may be reached at exit
  std::istringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    std::string name = item;
    long rank = -1;
    Armed a;
    if (auto hash = name.find('#'); hash != std::string::npos) {
      rank = parse_number(item, name.substr(hash + 1), "rank");
      name.resize(hash);
    }
    if (auto at = name.find('@'); at != std::string::npos) {
      a.at = parse_number(item, name.substr(at + 1), "hit count");
      name.resize(at);
    }
    if (name.empty()) throw ConfigError("DISTRL_FAILPOINTS: '" + item + "' names no point");
    if (rank >= 0 && (!rank_env || std::to_string(rank) != rank_env)) continue;
    p->armed[name] = a;
  }
  return p;
}

}  // namespace

bool failpoint(const char* name) {
  static Points* const points = load();
  if (!points) return false;
  std::lock_guard<std::mutex> lock(points->mu);
  auto it = points->armed.find(name);
  if (it == points->armed.end() || ++it->second.hits != it->second.at) return false;
  DISTRL_LOG(Warn, "failpoint " << name << " fires (hit " << it->second.hits << ", DISTRL_FAILPOINTS)");
  return true;
}

}  // namespace distrl
