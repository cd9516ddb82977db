// Writing a run's outputs so that a full disk is a clear error, never a lost or torn file.
// Free functions, no state: thread-safe for different paths.
#pragma once

#include <fstream>
#include <ostream>
#include <string>

namespace distrl {

// Writes bytes to path.tmp, fsyncs it, renames it over path and fsyncs the directory (creating
// the directory first). On any failure (ENOSPC, EDQUOT, EFBIG, EACCES, ...) path.tmp is removed,
// path is left exactly as it was (the previous checkpoint stays loadable) and OutputError names
// the file and the reason. mode (less the umask) is the file's permission from its creation on
// (0600 for a secret: it is never readable by others, not even as path.tmp).
void write_file_atomically(const std::string& path, const std::string& bytes, unsigned mode = 0644);

// Flushes s and throws OutputError naming path and the reason when any write to it failed
// (a std::ofstream only sets failbit: a full disk would otherwise leave a short file silently).
// Call it after each row: the reason (errno) is known only when the flush itself failed.
void check_written(std::ostream& s, const std::string& path);

// A CSV file of a run: opened with its header, one comma-joined row at a time, each flushed and
// checked (OutputError naming the file when a write fails: a full disk stops the run there, not
// at its end). Default-constructed: closed, and row() writes nothing. Not thread-safe.
class CsvFile {
 public:
  CsvFile() = default;
  // A fresh run (resumed_at < 0): truncated and given `header`. A resumed run: appended to, the
  // rows whose first column (the step, epoch or round) is past resumed_at dropped first (the
  // run does them again: a run killed after its last checkpoint wrote them), and said on stdout;
  // a file with another header is a ConfigError (another workload's outputs). OutputError
  // naming the file when it cannot be read, rewritten or opened.
  CsvFile(std::string path, const std::string& header, long long resumed_at = -1);

  template <typename... V>
  void row(const V&... values) {
    if (!out_.is_open()) return;
    const char* sep = "";
    ((out_ << sep << values, sep = ","), ...);
    out_ << '\n';
    check_written(out_, path_);
  }
  void close() { out_.close(); }
  const std::string& path() const { return path_; }
  // A resumed run's last row kept from before (the row before its first new one); "" otherwise.
  const std::string& last_kept_row() const { return last_kept_; }

 private:
  std::ofstream out_;
  std::string path_;
  std::string last_kept_;
};

}  // namespace distrl
