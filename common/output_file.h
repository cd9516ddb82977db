// Writing a run's outputs so that a full disk is a clear error, never a lost or torn file.
// Free functions, no state: thread-safe for different paths.
#pragma once

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

}  // namespace distrl
