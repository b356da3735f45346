#include "trainbench/measure/variance.hpp"

#include <algorithm>
#include <cmath>

#include "trainbench/measure/stats.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

variance_split split_variance(const std::vector<std::vector<double>>& by_process) {
  variance_split s;
  double sum = 0, sum_sq_sizes = 0;
  for (const auto& g : by_process) {
    if (g.empty()) continue;
    ++s.processes;
    s.windows += g.size();
    for (double v : g) sum += v;
    sum_sq_sizes += static_cast<double>(g.size()) * static_cast<double>(g.size());
  }
  if (s.windows == 0) return s;
  const double n = static_cast<double>(s.windows), k = static_cast<double>(s.processes);
  s.grand_mean = sum / n;
  double ss_within = 0, ss_between = 0;
  for (const auto& g : by_process) {
    if (g.empty()) continue;
    double mean = 0;
    for (double v : g) mean += v;
    mean /= static_cast<double>(g.size());
    for (double v : g) ss_within += (v - mean) * (v - mean);
    ss_between += static_cast<double>(g.size()) * (mean - s.grand_mean) * (mean - s.grand_mean);
  }
  if (n <= k || s.grand_mean == 0) return s;  // no process has two windows: nothing within to measure
  const double ms_within = ss_within / (n - k);
  s.within_sd = std::sqrt(ms_within) / s.grand_mean;
  if (s.processes < 2) return s;
  const double ms_between = ss_between / (k - 1);
  const double n0 = (n - sum_sq_sizes / n) / (k - 1);  // the group size of a balanced design with this power
  const double between_var = std::max(0.0, (ms_between - ms_within) / n0);
  s.between_sd = std::sqrt(between_var) / s.grand_mean;
  const double total = between_var + ms_within;
  s.icc = total > 0 ? between_var / total : 0.0;
  return s;
}

std::vector<double> process_medians(const std::vector<std::vector<double>>& by_process) {
  std::vector<double> out;
  for (const auto& g : by_process)
    if (!g.empty()) out.push_back(quantile(g, 0.5));
  return out;
}

std::vector<std::vector<double>> group_by_process(const std::vector<double>& windows, const std::vector<int>& process) {
  if (process.empty()) {
    if (windows.empty()) return {};
    return {windows};
  }
  TB_ASSERT(process.size() == windows.size(), "a process id for every window");
  std::vector<int> ids;
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const auto group = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), process[i]) - ids.begin());
    if (group == ids.size()) {
      ids.push_back(process[i]);
      out.emplace_back();
    }
    out[group].push_back(windows[i]);
  }
  return out;
}

std::optional<double> optimal_windows(double within_sd, double between_sd, double process_cost_s,
                                      double window_cost_s) {
  if (!(between_sd > 0) || !(window_cost_s > 0)) return std::nullopt;
  return std::sqrt(process_cost_s * within_sd * within_sd / (window_cost_s * between_sd * between_sd));
}

repetition_plan plan_figures(int processes, int windows, double within_sd, double between_sd, double process_cost_s,
                             double window_cost_s) {
  repetition_plan p;
  p.processes = processes;
  p.windows_per_process = windows;
  p.seconds = processes * (process_cost_s + windows * window_cost_s);
  p.unit_sd = std::sqrt(between_sd * between_sd + within_sd * within_sd / windows);
  // Two runs of this plan, compared on their process medians: the Hodges-Lehmann interval is
  // about sqrt(pi / 3) wider than the normal one on means (asymptotic relative efficiency 3/pi).
  constexpr double pi = 3.141592653589793;
  const double se = p.unit_sd * std::sqrt(2.0 / processes) * std::sqrt(pi / 3.0);
  p.half_width = 1.959964 * se;
  p.detectable = (1.959964 + 0.841621) * se;
  return p;
}

std::vector<repetition_plan> plans_within(double within_sd, double between_sd, double process_cost_s,
                                          double window_cost_s, double budget_s, int min_processes) {
  TB_ASSERT(process_cost_s >= 0 && window_cost_s > 0 && min_processes >= 1, "plan costs");
  std::vector<repetition_plan> out;
  for (int p = std::max(1, min_processes); p <= 100000; ++p) {
    // With p processes, more windows only ever narrow the interval: take all the budget allows.
    const double per_process = budget_s / p - process_cost_s;
    const double windows = std::floor(per_process / window_cost_s);
    if (windows < min_windows_per_process) break;
    out.push_back(plan_figures(p, static_cast<int>(std::min(windows, 1e6)), within_sd, between_sd, process_cost_s,
                               window_cost_s));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const repetition_plan& a, const repetition_plan& b) { return a.half_width < b.half_width; });
  return out;
}

}  // namespace trainbench
