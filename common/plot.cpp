#include "common/plot.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace distrl {
namespace {

std::string quote(const std::string& s) {  // gnuplot single-quoted string
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : c == '_' ? std::string("\\_") : std::string(1, c);
  return out + "'";
}

}  // namespace

bool run_gnuplot(const std::string& script_text, const std::string& png) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::cerr << "(gnuplot is not installed: no " << png << "; make deps installs gnuplot-nox)\n";
    return false;
  }
  const std::string script = png + ".gp";
  {
    std::ofstream g(script);
    g << "set output '" << png << "'\n" << script_text;
    if (!g.flush()) {
      std::cerr << "(no plot: cannot write " << script << ")\n";
      return false;
    }
  }
  const bool ok = std::system(("gnuplot '" + script + "' 2>/dev/null").c_str()) == 0;
  std::error_code ec;
  std::filesystem::remove(script, ec);
  if (!ok) std::cerr << "(gnuplot failed: no " << png << ")\n";
  return ok;
}

bool plot_csv(const std::string& csv, const std::string& png, const std::vector<Chart>& charts) {
  std::ifstream in(csv);
  std::string header;
  if (!std::getline(in, header)) {
    std::cerr << "(no plot: " << csv << " is empty)\n";
    return false;
  }
  std::vector<std::string> columns;
  std::stringstream ss(header);
  for (std::string c; std::getline(ss, c, ',');) columns.push_back(c);
  auto column = [&](const std::string& name) {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return static_cast<int>(i) + 1;
    return 0;
  };
  for (const auto& chart : charts)
    for (const auto& s : chart.series)
      if (!column(s.x) || !column(s.y)) {
        std::cerr << "(no plot: " << csv << " has no column '" << (column(s.x) ? s.y : s.x) << "')\n";
        return false;
      }
  std::ostringstream g;
  {
    g << "set terminal png size " << 500 * charts.size() << ",420\n"
      << "set datafile separator ','\nset key below horizontal\nset grid\n"  // under the chart: never over a curve
      << "set multiplot layout 1," << charts.size() << "\n";
    for (const auto& chart : charts) {
      g << "set title " << quote(chart.title) << "\nset xlabel " << quote(chart.xlabel) << "\nplot ";
      for (std::size_t i = 0; i < chart.series.size(); ++i) {
        const auto& s = chart.series[i];
        g << (i ? ", " : "") << "'" << csv << "' skip 1 using " << column(s.x) << ":" << column(s.y)
          << " with linespoints title " << quote(s.title);
      }
      g << "\n";
    }
    g << "unset multiplot\n";
  }
  return run_gnuplot(g.str(), png);
}

}  // namespace distrl
