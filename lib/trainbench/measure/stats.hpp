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

// How much to trust a set of windows, from their cv, at the thresholds torch.utils.benchmark
// uses (it applies them to IQR / median): "ok" up to 10%, "noisy" above, "very_noisy" above 25%.
// Fewer than two windows have no spread to judge: "ok".
constexpr double noisy_cv = 0.10;
constexpr double very_noisy_cv = 0.25;
const char* noise_level(const summary& s);

}  // namespace trainbench
