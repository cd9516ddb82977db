#include "common/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "common/error.h"

namespace distrl {
namespace {

std::string reason(int err) {
  std::string r = std::strerror(err);
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) r += " (free some space, or point run.out_dir elsewhere)";
  if (err == EACCES || err == EPERM || err == EROFS) r += " (choose a writable run.out_dir)";
  return r;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes, unsigned mode) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw OutputError("cannot create the directory of '" + path + "': " + reason(ec.value()));
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // a leftover tmp would keep its own (maybe wider) mode
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) throw OutputError("cannot write '" + path + "': " + reason(errno));
  int err = 0;
  for (std::size_t off = 0; off < bytes.size() && err == 0;) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n > 0) off += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR) err = errno;
    else if (n == 0) err = EIO;
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw OutputError("cannot write '" + path + "': " + reason(err) + "; the file there before is unchanged");
  }
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // the rename itself survives a crash
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void check_written(std::ostream& s, const std::string& path) {
  const bool failed_before = !s;  // a write that filled the buffer failed already; errno may be stale
  errno = 0;
  s.flush();
  if (s) return;
  const int err = errno;
  throw OutputError("cannot write '" + path +
                    "': " + (err && !failed_before ? reason(err) : std::string("a write failed (is the disk full?)")));
}

CsvFile::CsvFile(std::string path, const std::string& header, long long resumed_at) : path_(std::move(path)) {
  std::string old;
  if (resumed_at >= 0) {
    std::ifstream in(path_, std::ios::binary);
    old.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const bool keep = !old.empty();  // an empty file is as good as none: written anew
  if (keep) {
    std::istringstream in(old);
    std::string first, line, kept;
    std::getline(in, first);
    if (first != header)
      throw ConfigError("'" + path_ + "' has the columns " + first + ", and this run writes " + header +
                        ": it holds another workload's rows (resume into that run's own run.out_dir)");
    long long dropped = 0;
    const bool torn = old.back() != '\n';  // a run killed in the middle of a row
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      char* end = nullptr;
      const double step = std::strtod(line.c_str(), &end);
      const bool last = in.peek() == std::char_traits<char>::eof();
      if ((end != line.c_str() && step > static_cast<double>(resumed_at)) || (last && torn)) ++dropped;
      else {
        kept += line + "\n";
        last_kept_ = line;
      }
    }
    if (dropped > 0) {
      write_file_atomically(path_, header + "\n" + kept);
      std::cout << path_ << ": dropped " << dropped << " row" << (dropped == 1 ? "" : "s") << " past " << resumed_at
                << ", where the checkpoint is (the run does them again)" << std::endl;
    }
  }
  out_.open(path_, keep ? std::ios::app : std::ios::trunc);
  if (!out_) throw OutputError("cannot open '" + path_ + "' for writing (choose a writable run.out_dir)");
  if (!keep) out_ << header << "\n";
  check_written(out_, path_);
}

}  // namespace distrl
