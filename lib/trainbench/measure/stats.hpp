#pragma once
// Summary statistics for samples (no torch here).
#include <optional>
#include <vector>

namespace trainbench {

struct summary {
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0, mean = 0, stdev = 0, cv = 0;
  std::size_t n = 0;
};

// Quantile with linear interpolation between order statistics (numpy's default, R type 7).
double quantile(std::vector<double> values, double q);
// stdev is the sample standard deviation (n - 1); 0 for a single value.
summary summarize(const std::vector<double>& values);

}  // namespace trainbench
