#pragma once
// Noise by level of repetition (no torch here): windows repeat inside a process, processes repeat
// the run. Kalibera and Jones, "Rigorous Benchmarking in Reasonable Time" (ISMM 2013): a
// random-effects model with one variance per level, and the repetitions per level that buy the
// narrowest interval for a time budget.
#include <cstddef>
#include <optional>
#include <vector>

namespace trainbench {

// One-way random-effects ANOVA over groups of windows (one group per process), unbalanced
// groups allowed: within = MSW, between = (MSB - MSW) / n0 (clipped at 0), n0 the effective
// group size. Standard deviations are relative to the grand mean, like a cv.
struct variance_split {
  std::size_t processes = 0, windows = 0;
  double grand_mean = 0;
  std::optional<double> within_sd;   // none when no process has two windows
  std::optional<double> between_sd;  // none with one process (or no within estimate)
  std::optional<double> icc;         // between^2 / (between^2 + within^2)
};
variance_split split_variance(const std::vector<std::vector<double>>& by_process);

// The median of each process's windows: the unit a process-level test ranks.
std::vector<double> process_medians(const std::vector<std::vector<double>>& by_process);

// Windows grouped by the process they came from, in order of first appearance. `process` is
// parallel to `windows`; empty means every window came from one process.
std::vector<std::vector<double>> group_by_process(const std::vector<double>& windows, const std::vector<int>& process);

// How to spend a budget on repetitions, for the narrowest interval of a mean over processes.
struct repetition_plan {
  int processes = 0, windows_per_process = 0;
  double seconds = 0;     // processes x (process cost + windows x window cost)
  double unit_sd = 0;     // relative sd of one process's mean: sqrt(between^2 + within^2 / windows)
  double half_width = 0;  // relative 95% half-width of the change between two runs of this plan
  double detectable = 0;  // relative change two such runs detect with 80% power at alpha 0.05
};

// Kalibera and Jones's optimum without the integer constraints: windows per process
// sqrt(process_cost * within^2 / (window_cost * between^2)); none when between is 0.
std::optional<double> optimal_windows(double within_sd, double between_sd, double process_cost_s, double window_cost_s);

// Two windows per process at least, so that every run of a plan still measures the noise within
// a process (with one, the two levels cannot be told apart), even where one would do.
constexpr int min_windows_per_process = 2;

// Every (processes >= min_processes, windows >= min_windows_per_process) that fits the budget,
// searched exhaustively; the one with the smallest variance of the grand mean first. Empty when
// not even min_processes x 2 windows fit.
std::vector<repetition_plan> plans_within(double within_sd, double between_sd, double process_cost_s,
                                          double window_cost_s, double budget_s, int min_processes);

// The same figures for a plan chosen by hand.
repetition_plan plan_figures(int processes, int windows, double within_sd, double between_sd, double process_cost_s,
                             double window_cost_s);

}  // namespace trainbench
