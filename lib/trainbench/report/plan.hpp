#pragma once
// trainbench plan: how to spend a time budget on fresh processes and windows per process, from a
// report that measured both levels of noise (no torch here). Kalibera and Jones's rule: the
// repetitions per level that minimise the interval's width for the cost of each level.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/measure/variance.hpp"

namespace trainbench {

struct plan_request {
  std::string report;          // a report, or a folder of reports of one profile
  std::string budget = "10m";  // "90s", "10m", "1.5h", or seconds
  double alpha = 0.05;
  std::string format = "text";  // text | json
};

// What a report says about its noise and costs, and the plans a budget allows.
struct budget_plan {
  std::string profile, profile_path;
  std::size_t processes = 0, windows = 0;  // as measured
  double within_sd = 0, between_sd = 0, icc = 0;
  double process_cost_s = 0, window_cost_s = 0;
  double budget_s = 0;
  int min_processes = 0;                  // per side, for the process-level test to reach alpha
  std::optional<double> optimal_windows;  // Kalibera and Jones's continuous optimum
  std::vector<repetition_plan> choices;   // best first; empty when the budget cannot fit min_processes
  repetition_plan as_measured;
};

// Seconds in "90s", "10m", "1.5h", "600"; throws input_error naming the text otherwise.
double parse_duration(const std::string& text, const std::string& what);
// From one report of several processes, or several reports of one profile (each report's
// processes kept apart): the split is computed from the windows themselves.
budget_plan plan_from_reports(const std::vector<nlohmann::json>& reports, const std::string& source, double budget_s,
                              double alpha);
std::string format_plan(const budget_plan& p, const std::string& format);
int plan_command(const plan_request& request);

}  // namespace trainbench
