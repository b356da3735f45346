#include "trainbench/history/series.hpp"

#include <algorithm>
#include <cmath>

#include "trainbench/measure/stats.hpp"
#include "trainbench/util/sha256.hpp"

namespace trainbench {

std::vector<std::string> environment_changes(const run_record& before, const run_record& after) {
  std::vector<std::string> out;
  for (std::size_t f = 0; f < environment_fields.size(); ++f) {
    if (before.env[f] == after.env[f]) continue;
    const std::string field = environment_fields[f];
    if (field == "profile" && before.profile_name != after.profile_name)  // a rename says so
      out.push_back(field + " " + before.profile_name + " (" + before.env[f] + ") -> " + after.profile_name + " (" +
                    after.env[f] + ")");
    else
      out.push_back(field + " " + before.env[f] + " -> " + after.env[f]);
  }
  return out;
}

bool counts(const run_record& run) { return run.status == "ok" && run.median.has_value(); }

std::string runs_fingerprint(const std::vector<run_record>& runs, const e_divisive_params& params) {
  std::string text = std::to_string(change_point_algorithm_version) + "\n" + describe(params) + "\n";
  for (const auto& r : runs)
    if (counts(r)) text += r.id + "\n";
  return sha256_hex(text);
}

change_point_set find_change_points(const std::vector<run_record>& runs, const e_divisive_params& params) {
  std::vector<const run_record*> counted;
  std::vector<double> medians, floors;
  for (const auto& r : runs) {
    if (!counts(r)) continue;
    counted.push_back(&r);
    medians.push_back(*r.median);
    floors.push_back(r.median_sd);
  }
  change_point_set set;
  set.algorithm = change_point_algorithm;
  set.version = change_point_algorithm_version;
  set.parameters = describe(params);
  set.runs_fingerprint = runs_fingerprint(runs, params);
  for (const auto& c : e_divisive(medians, floors, params).strong) {
    stored_change_point s;
    const run_record& before = *counted[c.index - 1];
    const run_record& after = *counted[c.index];
    s.run_id = after.id;
    s.previous_run_id = before.id;
    s.n_before = static_cast<std::int64_t>(c.n_before);
    s.n_after = static_cast<std::int64_t>(c.n_after);
    s.mean_before = c.mean_before;
    s.mean_after = c.mean_after;
    s.sd_before = c.sd_before;
    s.sd_after = c.sd_after;
    s.change_pct = 100 * c.forward_change();
    s.p = c.p;
    s.qhat = c.qhat;
    s.environment_changes = environment_changes(before, after);
    set.points.push_back(s);
  }
  return set;
}

std::vector<bool> find_outliers(const std::vector<run_record>& runs, const change_point_set& set) {
  std::vector<bool> out(runs.size(), false);
  std::vector<std::vector<std::size_t>> levels(1);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!counts(runs[i])) continue;
    const bool starts = std::any_of(set.points.begin(), set.points.end(),
                                    [&](const stored_change_point& c) { return c.run_id == runs[i].id; });
    if (starts && !levels.back().empty()) levels.emplace_back();
    levels.back().push_back(i);
  }
  for (const auto& level : levels) {
    if (level.size() < outlier_min_level) continue;
    std::vector<double> medians;
    double floor_ss = 0;
    for (std::size_t i : level) {
      medians.push_back(*runs[i].median);
      floor_ss += runs[i].median_sd * runs[i].median_sd;
    }
    const double centre = quantile(medians, 0.5);
    std::vector<double> deviations;
    for (double m : medians) deviations.push_back(std::fabs(m - centre));
    const double robust_sd = std::max({1.4826 * quantile(deviations, 0.5),
                                       std::sqrt(floor_ss / static_cast<double>(level.size())),
                                       1e-3 * std::fabs(centre)});
    for (std::size_t k = 0; k < level.size(); ++k)
      out[level[k]] = std::fabs(medians[k] - centre) > outlier_sd * robust_sd;
  }
  return out;
}

namespace {

bool current(const std::optional<change_point_set>& stored, const std::string& fingerprint) {
  return stored && stored->version == change_point_algorithm_version && stored->runs_fingerprint == fingerprint;
}

}  // namespace

series_view view_series(history_store& store, const series_record& series, const std::string& branch,
                        const e_divisive_params& params, bool save) {
  series_view v;
  v.series = series;
  v.branch = branch;
  v.runs = store.runs_of(series.id, branch);
  v.env_changes.resize(v.runs.size());
  for (std::size_t i = 1; i < v.runs.size(); ++i) v.env_changes[i] = environment_changes(v.runs[i - 1], v.runs[i]);
  auto stored = store.change_points_of(series.id, branch, change_point_algorithm, describe(params));
  if (current(stored, runs_fingerprint(v.runs, params))) {
    v.change_points = *stored;
    v.outlier = find_outliers(v.runs, v.change_points);
    return v;
  }
  v.change_points = find_change_points(v.runs, params);
  v.outlier = find_outliers(v.runs, v.change_points);
  v.recomputed = true;
  if (save && !store.db().read_only()) {  // read-only: kept in memory for this command
    write_transaction tx(store.db());
    store.save_change_points(series.id, branch, v.change_points);
    tx.commit();
  }
  return v;
}

void refresh_change_points(history_store& store, const std::string& series_id, const std::string& branch,
                           const e_divisive_params& params) {
  const auto runs = store.runs_of(series_id, branch);
  const auto stored = store.change_points_of(series_id, branch, change_point_algorithm, describe(params));
  if (current(stored, runs_fingerprint(runs, params))) return;
  store.save_change_points(series_id, branch, find_change_points(runs, params));
}

}  // namespace trainbench
