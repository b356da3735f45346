#include "trainbench/history/history.hpp"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "trainbench/history/import.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;

std::string default_history_db() {
  if (const char* v = std::getenv("TRAINBENCH_HISTORY_DB"); v && *v) return v;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
    return (fs::path(xdg) / "trainbench" / "history.sqlite").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : ".") / ".local" / "share" / "trainbench" / "history.sqlite").string();
}

void check_change_point_params(const e_divisive_params& p) {
  if (p.window < 2) throw input_error("--window " + std::to_string(p.window) + ": needs at least 2 runs");
  // A window's pair distances take window^2 doubles: 1000 runs are 8 MB, 50 000 would be 20 GB.
  if (p.window > max_change_point_window)
    throw input_error("--window " + std::to_string(p.window) + ": at most " + std::to_string(max_change_point_window) +
                      " runs (a window's pair distances grow with its square)");
  if (!(p.max_p > 0 && p.max_p < 1)) throw input_error("--max-p: expected a level between 0 and 1");
  if (!(p.min_magnitude >= 0)) throw input_error("--min-change: expected a percentage >= 0");
  if (p.min_segment < 1) throw input_error("--min-segment 0: a level needs at least 1 run");
}

namespace {

history_store open_store(const std::string& db, bool create, bool read_only = false) {
  return history_store(open_database(db.empty() ? default_history_db() : db, create, read_only));
}

bool matches(const series_record& s, const std::string& wanted) {
  return s.profile_name == wanted || (wanted.size() >= 4 && s.id.rfind(wanted, 0) == 0);
}

}  // namespace

int history_add_command(const history_add_request& req) {
  set_log_quiet(req.quiet);
  check_change_point_params(req.params);
  run_origin given{req.commit, req.branch, req.time.empty() ? "" : normalize_time(req.time, "--time")};
  const run_origin origin = detect_origin(given);
  // Every report is read and checked before the database is touched: a bad one adds nothing.
  const read_result read = read_runs(req.inputs, origin);
  for (const auto& s : read.skipped) log_info("history add: skipped '" + s + "' (not a run report)");
  history_store store = open_store(req.db, true);
  std::vector<std::string> added;
  {
    write_transaction tx(store.db());
    added = store.add_runs(read.runs);
    std::set<std::pair<std::string, std::string>> touched;
    for (const auto& r : read.runs) touched.insert({r.series_id, r.branch});
    for (const auto& [series, branch] : touched) refresh_change_points(store, series, branch, req.params);
    tx.commit();
  }
  std::size_t failed = 0;
  for (const auto& r : read.runs)
    if (r.status != "ok") ++failed;
  const std::string summary = "history add: " + std::to_string(added.size()) + " new run(s), " +
                              std::to_string(read.runs.size() - added.size()) + " already present" +
                              (failed ? ", " + std::to_string(failed) + " of them failed or interrupted runs" : "") +
                              "; commit " + origin.commit.substr(0, 12) + ", branch " + origin.branch + " -> " +
                              store.db().where();
  log_result(summary);
  return exit_code::ok;
}

std::vector<series_view> load_views(history_store& store, const std::vector<std::string>& wanted,
                                    const std::string& branch, const e_divisive_params& params) {
  const auto all = store.all_series();
  std::vector<series_record> picked;
  for (const auto& s : all) {
    bool hit = wanted.empty();
    for (const auto& w : wanted) hit = hit || matches(s, w);
    if (hit) picked.push_back(s);
  }
  for (const auto& w : wanted) {
    bool found = false;
    for (const auto& s : all) found = found || matches(s, w);
    if (!found) {
      std::vector<std::string> names;
      for (const auto& s : all) names.push_back(s.profile_name + " (" + s.id + ")");
      throw input_error("--series '" + w +
                        "': no such series (a profile name, or a series id of at least 4 characters)" +
                        (names.empty() ? std::string("; the database is empty") : "; known: " + join(names, ", ")));
    }
  }
  std::vector<series_view> views;
  for (const auto& s : picked) {
    std::string b = branch;
    if (b.empty()) {
      const auto branches = store.branches_of(s.id);
      if (branches.empty()) continue;
      b = branches.front();
    }
    auto v = view_series(store, s, b, params, true);
    if (!v.runs.empty()) views.push_back(std::move(v));
  }
  return views;
}

int history_show_command(const history_show_request& request) {
  history_show_request req = request;
  if (req.otava_compatible) req.params = otava_compatible(req.params);
  check_change_point_params(req.params);
  if (!req.out.empty()) check_writable_folder(req.out, "--out");
  history_store store = open_store(req.db, false, true);  // show only reads: change points stay in memory
  const auto views = load_views(store, req.series, req.branch, req.params);
  if (req.format == "json")
    std::cout << format_history_json(views, store.db().where(), req.params);
  else
    std::cout << format_history_text(views, req.last);
  if (!req.out.empty()) {
    for (const auto& v : views) write_file_atomic(fs::path(req.out) / (v.series.id + ".svg"), history_chart_svg(v));
    write_file_atomic(fs::path(req.out) / "index.html", history_index_html(views, store.db().where()));
    log_info("history show: " + std::to_string(views.size()) + " series -> " +
             (fs::path(req.out) / "index.html").string());
  }
  return exit_code::ok;
}

}  // namespace trainbench
