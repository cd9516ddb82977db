// Runs a script under the Python that has the reference packages (TensorBoard's reader,
// Gymnasium): DISTRL_REFERENCE_PYTHON (`make test` points it at its reference venv), else
// python3. A script exits 3 when its package is missing; the caller then skips, saying why.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace distrl::testing {

struct PythonRun {
  bool ran = false;  // false: no such Python or package here; `why` says so (skip that check)
  int code = -1;
  std::string out, why;  // out: stdout and stderr
};

// `script` under tests/support/, `args` appended as they are (a redirection too); `needs` names
// the package for the skip message.
inline PythonRun run_reference_python(const std::string& script, const std::string& args, const std::string& needs) {
  const char* env = std::getenv("DISTRL_REFERENCE_PYTHON");
  const std::string python = env && *env ? env : "python3";
  PythonRun r;
  FILE* p =
      ::popen((python + " " + DISTRL_SOURCE_DIR + "/tests/support/" + script + " " + args + " 2>&1").c_str(), "r");
  if (!p) {
    r.why = "cannot start " + python;
    return r;
  }
  std::array<char, 8192> buf;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p)) r.out += buf.data();
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (r.code == 3 || r.code == 127) {
    r.why = "no " + needs + " (" + python + ": " + r.out + "); `make test` installs it, or set DISTRL_REFERENCE_PYTHON";
    return r;
  }
  r.ran = true;
  return r;
}

}  // namespace distrl::testing
