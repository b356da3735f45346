// history show's console table and its JSON for scripts.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainbench/history/history.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {

namespace {

using nlohmann::ordered_json;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string signed_pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", v);
  return buf;
}

std::string p_text(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, p < 1e-4 ? "%.1e" : "%.4f", p);
  return buf;
}

std::string short_commit(const std::string& c) { return c.substr(0, 10); }

const run_record* find_run(const series_view& v, const std::string& id) {
  for (const auto& r : v.runs)
    if (r.id == id) return &r;
  return nullptr;
}

// The IQR as a share of the median: the run's own spread, as the table shows it.
std::string spread_text(const run_record& r) {
  if (!r.median || !r.q1 || !r.q3 || *r.median == 0) return "-";
  return "±" + fixed(50 * (*r.q3 - *r.q1) / *r.median, 1) + "%";
}

// Pads to `width` columns of a terminal: UTF-8 continuation bytes take none (the ± sign).
std::string pad(std::string s, std::size_t width) {
  std::size_t columns = 0;
  for (unsigned char c : s) columns += (c & 0xC0) != 0x80;
  if (columns < width) s.append(width - columns, ' ');
  return s;
}

std::string change_line(const series_view& v, const stored_change_point& c) {
  const run_record* before = find_run(v, c.previous_run_id);
  const run_record* after = find_run(v, c.run_id);
  std::string range =
      (before ? short_commit(before->commit) : "?") + ".." + (after ? short_commit(after->commit) : "?");
  std::string line = "  " + pad(range, 23) + pad(signed_pct(c.change_pct), 9) + fixed(c.mean_before, 1) + " -> " +
                     fixed(c.mean_after, 1) + " samples/s, p " + p_text(c.p) + " (" + std::to_string(c.n_before) +
                     " runs before, " + std::to_string(c.n_after) + " after)";
  if (!c.environment_changes.empty())
    line += "\n  " + std::string(23, ' ') + "environment: " + join(c.environment_changes, ", ");
  return line + "\n";
}

ordered_json run_json(const run_record& r, const std::vector<std::string>& changes, bool outlier) {
  ordered_json env = ordered_json::object();
  for (std::size_t f = 0; f < environment_fields.size(); ++f) env[environment_fields[f]] = r.env[f];
  const auto opt = [](const std::optional<double>& v) { return v ? ordered_json(*v) : ordered_json(nullptr); };
  return {{"id", r.id},
          {"commit", r.commit},
          {"branch", r.branch},
          {"time", r.time},
          {"status", r.status},
          {"error_kind", r.error_kind.empty() ? ordered_json(nullptr) : ordered_json(r.error_kind)},
          {"median", opt(r.median)},
          {"q1", opt(r.q1)},
          {"q3", opt(r.q3)},
          {"median_sd", r.median_sd},
          {"windows", r.window_count},
          {"processes", r.process_count},
          {"counts", counts(r)},
          {"outlier", outlier},
          {"environment", env},
          {"environment_changes", changes},
          {"source", r.source}};
}

ordered_json change_json(const series_view& v, const stored_change_point& c) {
  const run_record* before = find_run(v, c.previous_run_id);
  const run_record* after = find_run(v, c.run_id);
  return {{"commit_before", before ? before->commit : ""},
          {"commit", after ? after->commit : ""},
          {"time", after ? after->time : ""},
          {"run_id", c.run_id},
          {"previous_run_id", c.previous_run_id},
          {"change_pct", c.change_pct},
          {"mean_before", c.mean_before},
          {"mean_after", c.mean_after},
          {"sd_before", c.sd_before},
          {"sd_after", c.sd_after},
          {"runs_before", c.n_before},
          {"runs_after", c.n_after},
          {"p_value", c.p},
          {"confidence", 1 - c.p},
          {"environment_changes", c.environment_changes}};
}

}  // namespace

std::string format_history_text(const std::vector<series_view>& views, std::size_t last) {
  std::ostringstream out;
  if (views.empty()) out << "history: no runs in the database (trainbench history add REPORT...)\n";
  for (const auto& v : views) {
    std::size_t counted = 0, failed = 0;
    for (const auto& r : v.runs) (counts(r) ? counted : failed)++;
    out << v.series.profile_name << "  [" << v.series.machine_class << "]  branch " << v.branch << "  (series "
        << v.series.id << ")\n";
    out << "  " << v.runs.size() << " runs (" << failed << " failed, interrupted or empty), "
        << v.change_points.points.size() << " change point" << (v.change_points.points.size() == 1 ? "" : "s") << "\n";
    for (const auto& c : v.change_points.points) out << change_line(v, c);
    const std::size_t from = v.runs.size() > last ? v.runs.size() - last : 0;
    if (from > 0) out << "  ... " << from << " earlier runs (--last N, or --format json for all)\n";
    out << "  " << pad("time", 21) << pad("commit", 11) << pad("median", 10) << pad("spread", 8) << pad("status", 12)
        << "environment changes\n";
    for (std::size_t i = from; i < v.runs.size(); ++i) {
      const auto& r = v.runs[i];
      std::string marker = " ";
      for (const auto& c : v.change_points.points)
        if (c.run_id == r.id) marker = "*";
      const bool outlier = i < v.outlier.size() && v.outlier[i];
      if (outlier) marker = "!";
      out << " " << marker << pad(r.time, 21) << pad(short_commit(r.commit), 11)
          << pad(r.median ? fixed(*r.median, 1) : "-", 10) << pad(spread_text(r), 8)
          << pad(outlier ? "outlier" : r.status, 12)
          << join(v.env_changes[i], ", ") << "\n";
    }
    out << "\n";
  }
  return out.str();
}

std::string format_history_json(const std::vector<series_view>& views, const std::string& where,
                                const e_divisive_params& params) {
  ordered_json out;
  out["database"] = where;
  out["algorithm"] = {{"name", change_point_algorithm}, {"version", change_point_algorithm_version},
                      {"parameters", describe(params)}, {"window", params.window},
                      {"max_p", params.max_p},          {"min_magnitude", params.min_magnitude}};
  out["series"] = ordered_json::array();
  for (const auto& v : views) {
    ordered_json s = {{"id", v.series.id},
                      {"profile_name", v.series.profile_name},
                      {"profile_hash", v.series.profile_hash},
                      {"workload", v.series.workload},
                      {"machine_class", v.series.machine_class},
                      {"branch", v.branch}};
    s["runs"] = ordered_json::array();
    for (std::size_t i = 0; i < v.runs.size(); ++i) s["runs"].push_back(run_json(v.runs[i], v.env_changes[i], i < v.outlier.size() && v.outlier[i]));
    s["change_points"] = ordered_json::array();
    for (const auto& c : v.change_points.points) s["change_points"].push_back(change_json(v, c));
    s["latest_change"] =
        v.change_points.points.empty() ? ordered_json(nullptr) : change_json(v, v.change_points.points.back());
    s["change_points_computed_at"] = v.change_points.computed_at;
    out["series"].push_back(s);
  }
  return out.dump(2) + "\n";
}

}  // namespace trainbench
