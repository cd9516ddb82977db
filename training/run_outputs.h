// A run's output directory: created, config.yaml written, and a CSV opened with its header —
// the same for every workload, with one error naming the directory when any of it fails.
#pragma once

#include <fstream>
#include <string>

namespace distrl::training {

// Creates out_dir, writes config_yaml to out_dir/config.yaml and opens out_dir/csv_name: appended
// to when `append` and the file exists (a resumed run), else truncated and given `header`.
// Throws OutputError naming the file and the reason when the directory or a file cannot be
// written. Check each row with common/output_file.h's check_written(csv, path).
std::ofstream open_run_outputs(const std::string& out_dir, const std::string& config_yaml, const std::string& csv_name,
                               const std::string& header, bool append = false);

}  // namespace distrl::training
