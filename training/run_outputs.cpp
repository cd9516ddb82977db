#include "training/run_outputs.h"

#include <filesystem>

#include "common/error.h"
#include "common/output_file.h"

namespace distrl::training {

std::ofstream open_run_outputs(const std::string& out_dir, const std::string& config_yaml, const std::string& csv_name,
                               const std::string& header, bool append) {
  write_file_atomically(out_dir + "/config.yaml", config_yaml);  // creates out_dir
  const std::string path = out_dir + "/" + csv_name;
  const bool keep = append && std::filesystem::exists(path);
  std::ofstream csv(path, keep ? std::ios::app : std::ios::trunc);
  if (!csv) throw OutputError("cannot open '" + path + "' for writing (choose a writable run.out_dir)");
  if (!keep) csv << header << "\n";
  check_written(csv, path);
  return csv;
}

}  // namespace distrl::training
