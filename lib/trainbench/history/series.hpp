#pragma once
// A series (one resolved profile on one machine class) on one branch: its runs in time order,
// the environment changes between them, and the change points of their medians. No torch here.
#include <string>
#include <vector>

#include "trainbench/history/store.hpp"
#include "trainbench/measure/change_points.hpp"

namespace trainbench {

constexpr const char* change_point_algorithm = "e-divisive-means";
// Bumped whenever the algorithm would find other change points in the same data: stored sets
// of an older version are recomputed.
constexpr int change_point_algorithm_version = 2;  // 2: min_segment

// "driver 570.86 -> 575.51" for each environment field that differs.
std::vector<std::string> environment_changes(const run_record& before, const run_record& after);
// A run that counts for change points: it finished (status ok) and measured a window.
bool counts(const run_record& run);
// Over the ids of the counted runs in order, the algorithm's version and its parameters.
std::string runs_fingerprint(const std::vector<run_record>& runs, const e_divisive_params& params);
// E-Divisive over the counted runs' medians, each run's own median_sd as its spread floor.
change_point_set find_change_points(const std::vector<run_record>& runs, const e_divisive_params& params);

// A counted run is an outlier when its median lies more than outlier_sd (3.5) robust sds (1.4826 x the
// median absolute deviation of its level's medians, at least the rms of their own median_sd and
// 0.1% of the level) from its level's median; levels (the runs between change points) of fewer
// than outlier_min_level counted runs mark none. An outlier is shown as one, and the gate leaves
// it out of a baseline: one run never decides a verdict.
constexpr double outlier_sd = 3.5;
constexpr std::size_t outlier_min_level = 5;
// Per run (parallel to runs): whether it is an outlier of its level.
std::vector<bool> find_outliers(const std::vector<run_record>& runs, const change_point_set& set);

struct series_view {
  series_record series;
  std::string branch;
  std::vector<run_record> runs;                       // every run on the branch, in time order
  std::vector<std::vector<std::string>> env_changes;  // per run, against the run before it
  change_point_set change_points;
  std::vector<bool> outlier;  // per run: an outlier of its level (find_outliers)
  bool recomputed = false;  // the stored set was missing or stale
};

// The series on a branch with its change points: the stored set when it was computed on these
// very runs with these parameters, else computed now and, with `save`, stored in a transaction
// of its own.
series_view view_series(history_store& store, const series_record& series, const std::string& branch,
                        const e_divisive_params& params, bool save);
// Recomputes and stores the set for a series on a branch when stale; the caller holds a write
// transaction (history add, after adding runs).
void refresh_change_points(history_store& store, const std::string& series_id, const std::string& branch,
                           const e_divisive_params& params);

}  // namespace trainbench
