#include "training/run_outputs.h"

#include <filesystem>

#include "common/error.h"

namespace distrl::training {

std::ofstream open_run_outputs(const std::string& out_dir, const std::string& config_yaml, const std::string& csv_name,
                               const std::string& header, bool append) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  std::ofstream(out_dir + "/config.yaml") << config_yaml;
  const std::string path = out_dir + "/" + csv_name;
  const bool keep = append && std::filesystem::exists(path);
  std::ofstream csv(path, keep ? std::ios::app : std::ios::trunc);
  if (ec || !csv) throw Error("cannot write " + path + " (check run.out_dir)");
  if (!keep) csv << header << "\n";
  return csv;
}

}  // namespace distrl::training
