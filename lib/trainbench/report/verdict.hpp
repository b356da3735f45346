#pragma once
// What two sets of windows say about a change (no torch here): compare, bottleneck and the
// ladder all judge with these rules.
//   FASTER / SLOWER  the test rejects "no change" at alpha (after Holm's correction across the
//                    family of profiles compared) and the measured change exceeds the threshold;
//   SAME             the change's 1 - alpha interval lies within ±threshold: an equivalence claim;
//   AMBIGUOUS        neither: the interval reaches beyond the threshold, or too few processes
//                    (windows) for the test to reach alpha at all.
// The unit of evidence is the process by default: windows of one process share its luck
// (memory layout, thread placement, the kernels chosen, clocks), so the test ranks each
// process's median window. The window level treats every window as independent, which holds
// only for windows measured in one process, such as bottleneck's interleaved loops.
#include <optional>
#include <string>
#include <vector>

#include "trainbench/measure/rank_test.hpp"

namespace trainbench {

enum class verdict { faster, slower, same, ambiguous };
const char* to_string(verdict v);

// run: each run (one side's processes measured together at one time: a report's, or a block of
// one side's processes between the other side's) is one observation, summarised by the median of
// its processes' medians; the test is Student's t on the logs of those summaries, which with one
// candidate run is the prediction interval of a new run among the baseline's. Processes of one
// run share its level (the machine's hour), which no count of them can see.
enum class evidence_level { process, window, run };
const char* to_string(evidence_level l);  // "process", "window", "run"
// What a test at this level assumes, for the rows and reports that show it.
std::string level_assumption(evidence_level l);

struct pair_row {
  std::string name, match;              // match: "hash" or "name"
  std::vector<double> base, candidate;  // samples/s per window
  // The process each window came from (parallel to base / candidate; empty: all from one).
  std::vector<int> base_process, candidate_process;
  // The run each window came from (parallel to base / candidate), at the run level.
  std::vector<int> base_run, candidate_run;
  evidence_level level = evidence_level::process;
  // How the two sides were arranged in time (compare): "interleaved", "apart", "runs"
  // (alternating runs of several processes), "unknown" (the reports do not say); "" elsewhere.
  std::string arrangement;
  // What the test ranks (set by measure_pair): each process's median window, or the windows.
  std::vector<double> base_units, candidate_units;
  double base_median = 0, candidate_median = 0, change_pct = 0;  // medians of the units
  mann_whitney test;
  double p_adjusted = 1;                    // test.p after Holm's correction (test.p in a family of one)
  std::size_t family_size = 1;              // tests the correction ran over (1: none)
  std::optional<change_interval> interval;  // at confidence 1 - alpha
  verdict result = verdict::ambiguous;
  std::string reason;
  // AMBIGUOUS: processes (windows, at the window level) per side that would likely decide it,
  // if the change stays where it is (empty when it is too close to the threshold to say).
  std::optional<std::size_t> to_decide;
};

// "processes", "windows" or "runs": what the row's counts count.
const char* unit_name(const pair_row& row);

// The medians, change, test and interval of a row whose base and candidate are set.
pair_row measure_pair(pair_row row, double alpha);
// The verdict and its reason, from what measure_pair found and row.p_adjusted.
pair_row decide(pair_row row, double threshold_pct, double alpha);
// Both, for one comparison on its own.
pair_row judge(pair_row row, double threshold_pct, double alpha);
// Holm's correction over the rows given (each measured): sets p_adjusted and family_size.
void correct_family(std::vector<pair_row*> rows);
// When the correction makes FASTER and SLOWER unreachable for every row: what it needs, and
// how many windows would reach it.
std::optional<std::string> family_warning(const std::vector<const pair_row*>& rows, double alpha);

// p with as many digits as it takes for its comparison with alpha to read true ("0.049996",
// never "0.05 < 0.05"); 3 significant digits at least.
std::string format_p(double p, double alpha);
// alpha as the reasons print it.
std::string format_alpha(double alpha);

}  // namespace trainbench
