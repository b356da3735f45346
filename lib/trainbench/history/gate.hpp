#pragma once
// trainbench history gate: a pull request's runs against the baseline branch's runs of the same
// series since that series' last change point, with compare's process-level verdicts and Holm's
// correction across series (report/verdict.hpp). No torch here.
#include <cstddef>
#include <string>
#include <vector>

#include "trainbench/history/series.hpp"
#include "trainbench/history/store.hpp"
#include "trainbench/measure/change_points.hpp"
#include "trainbench/report/verdict.hpp"

namespace trainbench {

struct history_gate_request {
  std::string db;                       // file or postgresql:// URL; empty: default_history_db()
  std::vector<std::string> candidates;  // report files and folders (need not be in the database)
  std::string branch = "main";          // the baseline branch
  std::string format = "text";          // text | markdown | json
  double threshold_pct = 3.0, alpha = 0.05;
  std::size_t baseline_runs = 50;  // the latest counted runs since the last change point
  std::size_t min_runs = 5;        // fewer baseline runs than this: the threshold rule
  bool require_baseline = false;   // a candidate series without baseline fails the gate (exit 1)
  e_divisive_params params;        // the change points' parameters, as history add was given them
};

// How a series' baseline was judged against.
//   test       the run-level test (Student's t over the runs' process medians, on the log scale),
//              Holm across series;
//   threshold  too little history for the test: the change of the medians against --threshold;
//   none       no counted run of the series on the branch: no verdict.
enum class baseline_rule { test, threshold, none };
const char* to_string(baseline_rule r);

struct gate_series {
  series_record series;
  baseline_rule rule = baseline_rule::none;
  std::vector<run_record> baseline;   // the baseline's runs, in time order
  std::string change_point_commit;    // first commit of the level compared with; empty: no change point
  double change_point_pct = 0;        // that change point's size
  std::size_t runs_since_change = 0;  // counted runs on the branch since it (before the cap)
  std::vector<run_record> candidate;  // the candidate's runs of this series
  pair_row row;                       // windows and processes of both sides, the test and the verdict
  bool measured = false;              // both sides have windows
  std::vector<std::string> environment_changes;  // latest baseline run -> candidate
  std::vector<std::string> notes;                // fallbacks and why
};

struct gate_result {
  std::string branch, where;
  double alpha = 0.05, threshold_pct = 3.0;
  std::size_t min_runs = 5, baseline_runs = 50;
  bool require_baseline = false;
  std::vector<gate_series> series;
  std::size_t family_size = 0;  // series the test (and Holm's correction) ran over
  std::vector<std::string> warnings;
  int exit_code = 0;
  std::string summary;  // one line
};

gate_result run_gate(history_store& store, const std::vector<run_record>& candidates,
                     const history_gate_request& request);
std::string format_gate(const gate_result& gate, const std::string& format);
// For the pull-request comment (--format markdown), which is public: text from profiles, reports
// and the database escaped so it renders as itself (markdown_text; markdown_code as a code span),
// and the database named without host, user, password or options (public_where: "PostgreSQL
// database NAME", or a SQLite file's name without its folder).
std::string markdown_text(const std::string& text);
std::string markdown_code(const std::string& text);
std::string public_where(const std::string& where);
// Exit 1 when a series is SLOWER or a candidate measured no window (or, with
// require_baseline, has no baseline); 2 on bad input; 0 otherwise.
int history_gate_command(const history_gate_request& request);

}  // namespace trainbench
