// Reads a Chrome-trace file (timeline.json) as JSON -- through yaml-cpp, whose YAML 1.2 parser
// reads JSON -- into its events, so tests check the file's structure, not its text.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace distrl::testing {

struct TraceEvent {
  std::string ph, name, cat;  // ph: M (metadata: a row's name), X (a box), s / f (an arrow's ends)
  int tid = -1;
  double ts = 0, dur = 0;
  long id = -1;          // arrows: s and f of one arrow share it
  std::string row_name;  // M events: args.name
};

// Throws YAML::Exception when the file is not well-formed.
inline std::vector<TraceEvent> read_chrome_trace(const std::string& path) {
  const YAML::Node root = YAML::LoadFile(path);
  std::vector<TraceEvent> out;
  for (const auto& e : root["traceEvents"]) {
    TraceEvent t;
    t.ph = e["ph"].as<std::string>();
    t.name = e["name"].as<std::string>();
    t.cat = e["cat"].as<std::string>("");
    t.tid = e["tid"].as<int>();
    t.ts = e["ts"].as<double>(0);
    t.dur = e["dur"].as<double>(0);
    t.id = e["id"].as<long>(-1);
    if (e["args"]) t.row_name = e["args"]["name"].as<std::string>("");
    out.push_back(t);
  }
  return out;
}

}  // namespace distrl::testing
