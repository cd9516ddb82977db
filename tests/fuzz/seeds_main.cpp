// distrl-fuzz-seeds DIR: writes each fuzz target's seed inputs to DIR/<target>/seed-<n>
// (`make fuzz-seeds` refreshes tests/fuzz/corpus/ with it after a wire format change).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tests/fuzz/fuzz_input.h"

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << "Usage: distrl-fuzz-seeds DIR\n"
                 "Writes every fuzz target's seed inputs to DIR/<target>/seed-<n>.\n";
    return argc == 2 ? 0 : 2;
  }
  for (const auto& t : distrl::fuzz::fuzz_targets()) {
    const auto dir = std::filesystem::path(argv[1]) / t.name;
    std::filesystem::create_directories(dir);
    const auto seeds = t.seeds();
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream out(dir / ("seed-" + std::to_string(i)), std::ios::binary);
      out.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
      if (!out) {
        std::cerr << "distrl-fuzz-seeds: cannot write " << (dir / ("seed-" + std::to_string(i))) << "\n";
        return 1;
      }
    }
    std::cout << t.name << ": " << seeds.size() << " seeds in " << dir.string() << "\n";
  }
  return 0;
}
