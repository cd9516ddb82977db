#include "common/event_file.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/host.h"
#include "common/output_file.h"

namespace distrl {
namespace {

constexpr std::uint32_t kCastagnoli = 0x82F63B78u;  // reflected

std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ kCastagnoli : c >> 1;
    t[i] = c;
  }
  return t;
}

std::uint32_t masked_crc(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A length-delimited field (wire type 2).
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double v) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | 1);
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_le(out, bits, 8);
}

std::string event_header(long long step) {
  std::string e;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  put_double(e, 1, now);  // wall_time
  put_varint(e, 2 << 3);  // step, varint
  put_varint(e, static_cast<std::uint64_t>(step));
  return e;
}

std::vector<std::string> split_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
  return cells;
}

bool parse_number(const std::string& cell, double* v) {
  if (cell.empty()) return false;
  char* end = nullptr;
  *v = std::strtod(cell.c_str(), &end);
  return end != nullptr && *end == '\0';
}

}  // namespace

unsigned crc32c(const void* data, std::size_t n) {
  static const auto table = make_table();
  std::uint32_t c = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

EventFile::EventFile(const std::string& dir, long long resumed_at) {
  static int made = 0;  // several in one process and second: names still differ
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = dir + "/events.out.tfevents." + std::to_string(secs) + "." + host_name() + "." + std::to_string(::getpid()) +
          "." + std::to_string(made++);
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_)
    throw OutputError("cannot open '" + path_ +
                      "' for writing (choose a writable run.out_dir, or set run.tensorboard: false)");
  std::string e = event_header(0);
  put_bytes(e, 3, "brain.Event:2");  // file_version
  record(e);
  if (resumed_at >= 0) {  // SessionLog{status: START} at the first step run again
    std::string log;
    put_varint(log, 1 << 3);  // status, varint
    put_varint(log, 1);       // START
    std::string start = event_header(resumed_at + 1);
    put_bytes(start, 7, log);  // Event.session_log
    record(start);
  }
  flush();
}

void EventFile::scalar(const std::string& tag, long long step, double value) {
  if (!std::isfinite(value)) return;
  std::string v;
  put_bytes(v, 1, tag);         // Summary.Value.tag
  put_varint(v, (2 << 3) | 5);  // simple_value, 32-bit
  const float f = static_cast<float>(value);
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  put_le(v, bits, 4);
  std::string summary;
  put_bytes(summary, 1, v);  // Summary.value
  std::string e = event_header(step);
  put_bytes(e, 5, summary);  // Event.summary
  record(e);
}

void EventFile::record(const std::string& payload) {
  std::string len;
  put_le(len, payload.size(), 8);
  std::string head = len;
  put_le(head, masked_crc(len.data(), len.size()), 4);
  std::string tail;
  put_le(tail, masked_crc(payload.data(), payload.size()), 4);
  out_ << head << payload << tail;
  if (!out_) throw OutputError("cannot write '" + path_ + "' (disk full? or set run.tensorboard: false)");
}

void EventFile::flush() {
  out_.flush();
  check_written(out_, path_);
}

CsvEvents::CsvEvents(const std::string& dir, const std::string& header, long long resumed_at, CsvScalars scalars,
                     const std::string& previous)
    : file_(dir, resumed_at), columns_(split_cells(header)) {
  for (const auto& c : columns_) {
    const auto t = scalars.tags.find(c);
    tags_.push_back(t == scalars.tags.end() ? c : t->second);
  }
  clock_ = scalars.clock.empty() ? -1 : column(scalars.clock);
  for (const auto& r : scalars.rates)
    if (const int c = column(r); c > 0 && clock_ > 0) rates_.push_back(c);
  if (resumed_at < 0) last_.assign(columns_.size(), 0.0);  // a fresh run starts from zero
  else if (scalars.carries_over && !previous.empty()) {
    const auto cells = split_cells(previous);
    last_.assign(columns_.size(), std::nan(""));
    for (std::size_t i = 0; i < cells.size() && i < last_.size(); ++i) parse_number(cells[i], &last_[i]);
  }
}

int CsvEvents::column(const std::string& name) const {
  for (std::size_t i = 1; i < columns_.size(); ++i)
    if (columns_[i] == name) return static_cast<int>(i);
  return -1;
}

void CsvEvents::row(const std::vector<std::string>& cells) {
  double step_value = 0;
  if (cells.empty() || !parse_number(cells[0], &step_value)) return;
  const auto step = static_cast<long long>(step_value);
  std::vector<double> values(columns_.size(), std::nan(""));
  for (std::size_t i = 1; i < cells.size() && i < columns_.size(); ++i)
    if (parse_number(cells[i], &values[i])) file_.scalar(tags_[i], step, values[i]);
  if (clock_ > 0) {
    const double dt = last_.empty() ? std::nan("") : values[clock_] - last_[clock_];
    if (dt > 0) {  // NaN (nothing before, a cell that is no number) and a clock that started again fail this
      file_.scalar("seconds_per_" + columns_[0], step, dt);
      for (int c : rates_) file_.scalar(columns_[c] + "_per_s", step, (values[c] - last_[c]) / dt);
    }
    last_ = values;
  }
  file_.flush();
}

}  // namespace distrl
