#include "trainbench/measure/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "trainbench/util/error.hpp"

namespace trainbench {

double quantile(std::vector<double> values, double q) {
  TB_ASSERT(!values.empty(), "quantile of no values");
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

summary summarize(const std::vector<double>& values) {
  summary s;
  s.n = values.size();
  if (values.empty()) return s;
  s.median = quantile(values, 0.5);
  s.q1 = quantile(values, 0.25);
  s.q3 = quantile(values, 0.75);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.n);
  if (s.n > 1) {
    double ss = 0;
    for (double v : values) ss += (v - s.mean) * (v - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(s.n - 1));
  }
  s.cv = s.mean != 0 ? s.stdev / s.mean : 0;
  return s;
}

const char* noise_level(const summary& s) {
  if (s.n < 2 || s.cv <= noisy_cv) return "ok";
  return s.cv <= very_noisy_cv ? "noisy" : "very_noisy";
}

}  // namespace trainbench
