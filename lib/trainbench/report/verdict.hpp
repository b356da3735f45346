#pragma once
// What two sets of windows say about a change (no torch here): compare, bottleneck and the
// ladder all judge with these rules.
//   FASTER / SLOWER  the test rejects "no change" at alpha (after Holm's correction across the
//                    family of profiles compared) and the measured change exceeds the threshold;
//   SAME             the change's 1 - alpha interval lies within ±threshold: an equivalence claim;
//   AMBIGUOUS        neither: the interval reaches beyond the threshold, or too few windows.
#include <optional>
#include <string>
#include <vector>

#include "trainbench/measure/rank_test.hpp"

namespace trainbench {

enum class verdict { faster, slower, same, ambiguous };
const char* to_string(verdict v);

struct pair_row {
  std::string name, match;              // match: "hash" or "name"
  std::vector<double> base, candidate;  // samples/s per window
  double base_median = 0, candidate_median = 0, change_pct = 0;
  mann_whitney test;
  double p_adjusted = 1;                    // test.p after Holm's correction (test.p in a family of one)
  std::size_t family_size = 1;              // tests the correction ran over (1: none)
  std::optional<change_interval> interval;  // at confidence 1 - alpha
  verdict result = verdict::ambiguous;
  std::string reason;
  // AMBIGUOUS: windows per side that would likely decide it, if the change stays where it is
  // (empty when it is too close to the threshold to say).
  std::optional<std::size_t> windows_to_decide;
};

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
