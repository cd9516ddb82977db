// The project's user documentation as one text (README.md and docs/*.md), for tests that check
// that every config key a tool binds is described there.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace distrl::testing {

inline std::string documentation_text() {
  const std::string root = DISTRL_SOURCE_DIR;
  auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  std::string text = read(root + "/README.md");
  for (const auto& entry : std::filesystem::directory_iterator(root + "/docs"))
    if (entry.path().extension() == ".md") text += read(entry.path());
  return text;
}

// Whether docs name `key` in backticks: `key`, `key: value` or `key=value`.
inline bool documents_key(const std::string& docs, const std::string& key) {
  for (const char* end : {"`", ":", "="})
    if (docs.find("`" + key + end) != std::string::npos) return true;
  return false;
}

}  // namespace distrl::testing
