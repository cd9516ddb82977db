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

CsvEvents::CsvEvents(const std::string& dir, const std::string& header, long long resumed_at) : file_(dir, resumed_at) {
  std::stringstream ss(header);
  for (std::string c; std::getline(ss, c, ',');) columns_.push_back(c);
  for (std::size_t i = 1; i < columns_.size(); ++i)
    if (columns_[i] == "seconds") seconds_column_ = static_cast<int>(i);
}

void CsvEvents::row(const std::vector<std::string>& cells) {
  double step_value = 0;
  if (cells.empty() || !parse_number(cells[0], &step_value)) return;
  const auto step = static_cast<long long>(step_value);
  for (std::size_t i = 1; i < cells.size() && i < columns_.size(); ++i) {
    double v = 0;
    if (parse_number(cells[i], &v)) file_.scalar(columns_[i], step, v);
  }
  double secs = 0;
  if (seconds_column_ > 0 && static_cast<std::size_t>(seconds_column_) < cells.size() &&
      parse_number(cells[seconds_column_], &secs)) {
    if (last_seconds_ >= 0) file_.scalar("seconds_per_" + columns_[0], step, secs - last_seconds_);
    last_seconds_ = secs;
  }
  file_.flush();
}

}  // namespace distrl
