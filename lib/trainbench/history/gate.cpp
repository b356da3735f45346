#include "trainbench/history/gate.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "trainbench/history/history.hpp"
#include "trainbench/history/import.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
using nlohmann::json;

const char* to_string(baseline_rule r) {
  switch (r) {
    case baseline_rule::test:
      return "test";
    case baseline_rule::threshold:
      return "threshold";
    case baseline_rule::none:
      return "none";
  }
  return "?";
}

namespace {

std::string short_commit(const std::string& c) { return c.substr(0, 12); }

std::string number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Windows of several runs as one side of a pair: each run's processes keep ids of their own, and
// every window the index of its run (the unit of the test).
void add_side(const std::vector<std::vector<window_record>>& windows, std::vector<double>& rates,
              std::vector<int>& process, std::vector<int>& run_of) {
  int next = 0;
  for (std::size_t run = 0; run < windows.size(); ++run) {
    std::map<std::int64_t, int> ids;
    for (const auto& w : windows[run]) {
      auto it = ids.find(w.process);
      if (it == ids.end()) it = ids.emplace(w.process, next++).first;
      rates.push_back(w.samples_per_s);
      process.push_back(it->second);
      run_of.push_back(static_cast<int>(run));
    }
  }
}

// The counted runs of the branch the candidate is judged against: those since the last change
// point (all when there is none), the latest `cap` of them; never a run the candidate brought.
void pick_baseline(gate_series& g, const series_view& view, const std::set<std::string>& candidate_ids,
                   std::size_t cap) {
  std::size_t start = 0;
  if (!view.change_points.points.empty()) {
    const auto& last = view.change_points.points.back();
    for (std::size_t i = 0; i < view.runs.size(); ++i)
      if (view.runs[i].id == last.run_id) {
        start = i;
        g.change_point_commit = view.runs[i].commit;
        g.change_point_pct = last.change_pct;
      }
  }
  std::vector<run_record> since;
  std::vector<std::string> outliers;
  for (std::size_t i = start; i < view.runs.size(); ++i) {
    if (!counts(view.runs[i]) || candidate_ids.count(view.runs[i].id)) continue;
    if (i < view.outlier.size() && view.outlier[i])
      outliers.push_back(short_commit(view.runs[i].commit));
    else
      since.push_back(view.runs[i]);
  }
  if (!outliers.empty())
    g.notes.push_back(std::to_string(outliers.size()) + " outlier run" + (outliers.size() == 1 ? "" : "s") +
                      " of the baseline's level left out (" + join(outliers, ", ") +
                      "): one run never decides a verdict (history show marks it)");
  g.runs_since_change = since.size();
  if (since.size() > cap) since.erase(since.begin(), since.end() - static_cast<std::ptrdiff_t>(cap));
  g.baseline = std::move(since);
}

std::string level_words(const gate_series& g) {
  return g.change_point_commit.empty()
             ? std::string("no change point on the branch: all its runs")
             : "since the change point at " + short_commit(g.change_point_commit) + " (" +
                   number("%+.1f%%", g.change_point_pct) + ")";
}

// Too few baseline runs for the test: the change of the medians against the threshold, outside
// Holm's family (it has no p-value).
void threshold_rule(gate_series& g, double threshold_pct, std::size_t min_runs) {
  pair_row& r = g.row;
  const std::size_t n = r.base_units.size();
  r.change_pct = 100.0 * (r.candidate_median / r.base_median - 1.0);
  r.result = r.change_pct < -threshold_pct  ? verdict::slower
             : r.change_pct > threshold_pct ? verdict::faster
                                            : verdict::same;
  r.reason = "threshold rule: change " + number("%+.1f%%", r.change_pct) +
             (r.result == verdict::same ? " within " : " beyond ") + number("±%g%%", threshold_pct);
  g.notes.push_back("too little history: " + std::to_string(n) + " baseline run" + (n == 1 ? "" : "s") + " " +
                    level_words(g) + ", fewer than the " + std::to_string(min_runs) +
                    " the test needs (--min-runs); judged by the threshold rule instead");
}

gate_series judge_series(history_store& store, const std::vector<series_record>& known, const std::string& id,
                         const std::vector<run_record>& candidate, const std::set<std::string>& candidate_ids,
                         const history_gate_request& req) {
  gate_series g;
  const run_record& first = candidate.front();
  g.series = {id, first.profile_hash, first.profile_name, first.machine_class, first.workload};
  g.candidate = candidate;
  g.row.name = first.profile_name;
  g.row.match = "hash";
  g.row.level = evidence_level::run;
  std::vector<std::vector<window_record>> cand_windows;
  for (const auto& r : candidate) {
    if (r.ranks_in_results < r.world_size) {  // one rank's windows: a W-th of the job's samples
      g.notes.push_back("the candidate run '" + r.source + "' holds the windows of " +
                        std::to_string(r.ranks_in_results) + " of its " + std::to_string(r.world_size) +
                        " ranks (they could not be gathered), not the job's; not judged against " +
                        std::to_string(r.world_size) + "-rank runs");
      continue;
    }
    cand_windows.push_back(r.windows);
    if (r.status != "ok")
      g.notes.push_back("the candidate run '" + r.source + "' ended with status '" + r.status + "' after " +
                        std::to_string(r.windows.size()) + " windows; judged on those");
  }
  add_side(cand_windows, g.row.candidate, g.row.candidate_process, g.row.candidate_run);
  const auto hit = std::find_if(known.begin(), known.end(), [&](const series_record& s) { return s.id == id; });
  if (hit != known.end()) {
    g.series.profile_name = hit->profile_name;
    pick_baseline(g, view_series(store, *hit, req.branch, req.params, false), candidate_ids, req.baseline_runs);
  }
  if (g.baseline.empty()) {
    g.rule = baseline_rule::none;
    g.row.reason = "no baseline: no run of this series on branch " + req.branch;
    g.notes.push_back(g.row.reason + (req.require_baseline ? " (--require-baseline: the gate fails)"
                                                           : " (not judged; the gate passes it with this warning)"));
    return g;
  }
  g.environment_changes = environment_changes(g.baseline.back(), first);
  std::vector<std::string> ids;
  for (const auto& r : g.baseline) ids.push_back(r.id);
  add_side(store.windows_of(ids), g.row.base, g.row.base_process, g.row.base_run);
  g.rule = g.baseline.size() >= req.min_runs ? baseline_rule::test : baseline_rule::threshold;
  g.measured = !g.row.candidate.empty() && !g.row.base.empty();
  if (!g.measured) {
    g.row.result = verdict::ambiguous;
    g.row.reason = first.ranks_in_results < first.world_size
                       ? "the candidate's windows are one rank's of " + std::to_string(first.world_size) +
                             " (status " + first.status + "); a gate cannot pass on them"
                       : "the candidate measured no window (status " + first.status + "); a gate cannot pass on it";
    return g;
  }
  g.row = measure_pair(g.row, req.alpha);
  if (g.rule == baseline_rule::threshold) threshold_rule(g, req.threshold_pct, req.min_runs);
  return g;
}

// The tested series are one family: Holm's correction across them, then each one's verdict.
void decide_family(gate_result& out, double threshold_pct, double alpha) {
  std::vector<pair_row*> family;
  for (auto& g : out.series)
    if (g.rule == baseline_rule::test && g.measured) family.push_back(&g.row);
  out.family_size = family.size();
  if (family.size() > 1) {
    correct_family(family);
    const std::vector<const pair_row*> view(family.begin(), family.end());
    if (const auto w = family_warning(view, alpha)) out.warnings.push_back(*w);
  }
  for (auto* r : family) *r = decide(*r, threshold_pct, alpha);
}

void conclude(gate_result& out) {
  std::map<std::string, std::size_t> counts;
  bool fail = false;
  for (const auto& g : out.series) {
    std::string v = g.rule == baseline_rule::none ? "NO BASELINE"
                    : !g.measured                 ? "NO WINDOWS"
                                                  : to_string(g.row.result);
    ++counts[v];
    fail = fail || v == "SLOWER" || v == "NO WINDOWS" || (v == "NO BASELINE" && out.require_baseline);
  }
  out.exit_code = fail ? exit_code::failed : exit_code::ok;
  std::string parts;
  for (const char* v : {"SLOWER", "NO WINDOWS", "NO BASELINE", "AMBIGUOUS", "SAME", "FASTER"})
    if (counts[v]) parts += (parts.empty() ? "" : ", ") + std::to_string(counts[v]) + " " + v;
  out.summary = std::string(fail ? "FAIL" : "PASS") + ": " + std::to_string(out.series.size()) + " series against " +
                out.branch + " (" + parts + ")";
}

}  // namespace

gate_result run_gate(history_store& store, const std::vector<run_record>& candidates, const history_gate_request& req) {
  gate_result out;
  out.branch = req.branch;
  out.where = store.db().where();
  out.alpha = req.alpha;
  out.threshold_pct = req.threshold_pct;
  out.min_runs = req.min_runs;
  out.baseline_runs = req.baseline_runs;
  out.require_baseline = req.require_baseline;
  std::vector<std::string> order;
  std::map<std::string, std::vector<run_record>> by_series;
  std::set<std::string> candidate_ids;
  for (const auto& r : candidates) {
    if (!by_series.count(r.series_id)) order.push_back(r.series_id);
    by_series[r.series_id].push_back(r);
    candidate_ids.insert(r.id);
  }
  const auto known = store.all_series();
  for (const auto& id : order)
    out.series.push_back(judge_series(store, known, id, by_series[id], candidate_ids, req));
  decide_family(out, req.threshold_pct, req.alpha);
  conclude(out);
  return out;
}

int history_gate_command(const history_gate_request& req) {
  if (req.threshold_pct < 0) throw input_error("--threshold must be >= 0");
  if (req.alpha <= 0 || req.alpha >= 1) throw input_error("--alpha must be in (0, 1)");
  if (req.baseline_runs < 1) throw input_error("--baseline-runs must be at least 1");
  if (req.min_runs < 2) throw input_error("--min-runs must be at least 2 (one run has no spread to test against)");
  if (req.branch.empty()) throw input_error("--branch: empty branch name");
  check_change_point_params(req.params);
  // The candidates are read and checked before the database is opened; the gate writes nothing.
  const read_result read = read_runs(req.candidates, detect_origin({}));
  if (read.runs.empty()) throw input_error("history gate: no run reports among the candidates given");
  history_store store(open_database(req.db.empty() ? default_history_db() : req.db, false, true));
  const auto branches = store.all_branches();
  if (std::find(branches.begin(), branches.end(), req.branch) == branches.end())
    throw input_error("--branch '" + req.branch + "': no run on this branch in " + store.db().where() +
                      (branches.empty() ? std::string(" (the database is empty)")
                                        : "; branches: " + join(branches, ", ")));
  gate_result g = run_gate(store, read.runs, req);
  for (const auto& s : read.skipped) g.warnings.push_back("skipped '" + s + "' (not a run report)");
  std::cout << format_gate(g, req.format) << std::flush;
  return g.exit_code;
}

}  // namespace trainbench
