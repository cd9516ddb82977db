// TensorBoard event files: scalars in the format TensorFlow's summary writer uses, so that
// `tensorboard --logdir RUN_DIR` (and TensorBoard's own readers) show a run beside its CSV.
//
// The format is small: a file named events.out.tfevents.<unix seconds>.<host>.<pid>.<n> holds
// TFRecords (u64 length, masked CRC-32C of the length, the payload, masked CRC-32C of the
// payload), each payload an `Event` protobuf: wall_time (1, double), step (2, int64), and either
// file_version (3, "brain.Event:2", the first record), session_log (7: status (1) START = 1, a
// resumed run's purge) or summary (5) with one value: tag (1) and simple_value (2, float).
// Those fields are encoded here by hand — smaller than
// building TensorBoard's .proto files with protoc at build time for them; the test reads the
// files back with TensorBoard's own reader.
//
// Lifetime: one per run directory and process; not thread-safe (the run loop's thread owns it).
#pragma once

#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace distrl {

class EventFile {
 public:
  // Creates a new event file in dir (which must exist; earlier files of a resumed run stay:
  // TensorBoard reads every file of a directory). A resumed run (resumed_at >= 0: the last step
  // its checkpoint holds) starts it with a SessionLog START at resumed_at + 1, which tells
  // TensorBoard to drop the earlier files' points from that step on (they run again), as
  // TensorFlow's summary writer does with purge_step. OutputError naming the file when it cannot.
  explicit EventFile(const std::string& dir, long long resumed_at = -1);
  // One scalar at `step`, stamped with the current wall time. NaN and infinities are skipped
  // (TensorBoard would draw them as gaps at best). OutputError when the write fails.
  void scalar(const std::string& tag, long long step, double value);
  // Written through to the file (after each row: `tensorboard` follows a live run).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& payload);
  std::ofstream out_;
  std::string path_;
};

// What a CSV's columns are to TensorBoard (CsvEvents). The default: every numeric cell a
// scalar under its column's name, nothing derived.
struct CsvScalars {
  // column -> the tag it is shown under ("mean_reward" -> "reward/mean"); other columns keep
  // their names.
  std::map<std::string, std::string> tags;
  // A column of seconds since the run began ("seconds"): adds seconds_per_<first column>, the
  // seconds between one row and the one before. Leave it empty for a column that holds each
  // row's own duration (that column is already the time per step).
  std::string clock;
  // Columns of running totals ("env_steps"): each adds <column>_per_s, its rate between one row
  // and the one before (by the clock, which it needs).
  std::vector<std::string> rates;
  // Whether the clock and the totals count on across a resume (the agent's do: its checkpoint
  // holds them). If not, a resumed run's first row derives nothing (its clock started again).
  bool carries_over = false;

  // Every column under its name, and `column` the clock.
  static CsvScalars with_clock(std::string column) {
    CsvScalars s;
    s.clock = std::move(column);
    return s;
  }
};

// A CSV's rows as scalars: the first column is the step (epoch, round, iteration), every other
// cell that is a number becomes a scalar (tagged as `scalars` says), and the clock's and the
// rates' differences between rows are scalars too (CsvScalars). The same numbers as the CSV, no
// second list of what a workload measures. The first row's differences are taken from zero in a
// fresh run (resumed_at < 0); in a resumed run from `previous` (the row before it, as the CSV
// holds it: its last kept row) when the clock carries over, else not at all. A difference over
// no time (a clock that started again) is skipped.
class CsvEvents {
 public:
  CsvEvents(const std::string& dir, const std::string& header, long long resumed_at = -1, CsvScalars scalars = {},
            const std::string& previous = "");
  void row(const std::vector<std::string>& cells);
  const std::string& path() const { return file_.path(); }

 private:
  int column(const std::string& name) const;  // -1: not a column of the header
  EventFile file_;
  std::vector<std::string> columns_;
  std::vector<std::string> tags_;  // per column
  int clock_ = -1;
  std::vector<int> rates_;
  std::vector<double> last_;  // the previous row's clock and rates, by column; empty: none known
};

// CRC-32C (Castagnoli), as TFRecord uses it (exposed for the tests).
unsigned crc32c(const void* data, std::size_t n);

}  // namespace distrl
