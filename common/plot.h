// Line charts of a CSV file through gnuplot (Debian's gnuplot-nox, installed by make deps):
// columns are named by the CSV's header row; one PNG holds the charts side by side.
//
//   plot_csv("runs/x/metrics.csv", "runs/x/learning_curve.png",
//            {{"loss", "epoch", {{"epoch", "train_loss", "train"}, {"epoch", "test_loss", "test"}}}});
#pragma once

#include <string>
#include <vector>

namespace distrl {

struct Series {
  Series(std::string x_column, std::string y_column, std::string name)
      : x(std::move(x_column)), y(std::move(y_column)), title(std::move(name)) {}
  std::string x, y;  // column names
  std::string title;
};

struct Chart {
  Chart(std::string chart_title, std::string x_label, std::vector<Series> lines)
      : title(std::move(chart_title)), xlabel(std::move(x_label)), series(std::move(lines)) {}
  std::string title;
  std::string xlabel;
  std::vector<Series> series;
};

// Returns false, saying why on stderr, when gnuplot is missing, a column is unknown or gnuplot
// fails; never throws (a missing plot must not fail a run).
bool plot_csv(const std::string& csv, const std::string& png, const std::vector<Chart>& charts);

// Runs a gnuplot script (terminal and plot commands; the output is set to png first) from a file
// beside png, removed afterwards. Returns false, saying why on stderr, when gnuplot is missing or
// fails; never throws. For pictures plot_csv does not draw (a pipeline timeline, say).
bool run_gnuplot(const std::string& script, const std::string& png);

}  // namespace distrl
