#pragma once
// Change points in a series of values: E-Divisive means in sliding windows with a t-test, then
// the weak/strong merge, as Hunter and Apache Otava do it (Fleming et al., "Hunter: Using Change
// Point Detection to Hunt for Performance Regressions", ICPE 2023, arXiv 2301.03034). No torch.
//
// Evidence: no change point leaves fewer than min_segment values on either side (below).
//
// Split: each window of `window` values (stepping by half a window, or to the last change found)
// is divided recursively at the point that maximises E-Divisive's Q-hat (the energy distance
// between the two sides, weighted by their sizes), as long as Student's t-test between the two
// sides has p <= a relaxed first-pass level (10 x max_p below 0.05). The union of what every window
// found are the weak change points. Merge: the weakest of them (the largest p, or when all pass,
// the smallest relative change) is dropped while its p exceeds max_p or its change is at most
// min_magnitude, and its neighbours are tested again against their new intervals.
#include <cstddef>
#include <string>
#include <vector>

namespace trainbench {

struct e_divisive_params {
  std::size_t window = 50;   // values per window (Otava's window_len)
  double max_p = 0.001;      // the final significance level (Otava's max_pvalue)
  double min_magnitude = 0;  // a relative change at or below this is merged away (Otava's min_magnitude)
  // The fewest values a level needs on either side of a change point: a split that leaves fewer
  // is never taken, and a change point whose interval before or after is shorter is merged
  // away, so a lone outlier (or two) is never a level of its own. 1: Otava's (none).
  std::size_t min_segment = 3;
  // Deliberate differences from Otava 0.8.0, each off in otava_compatible():
  bool sample_sd = true;         // the t-test's sides use the sample sd (n - 1); Otava's uses numpy's population sd
  bool merge_neighbours = true;  // after a merge, test the two change points beside the one dropped; Otava's
                                 // tests the one after it and the next (leaving the one before stale)
  bool spread_floor = true;      // a side's sd is at least the rms of its values' own spreads (sd_floor below)
};
// The parameters under which the results equal apache-otava 0.8.0's compute_change_points.
e_divisive_params otava_compatible(e_divisive_params p);
// The first-pass level of the split step: 10 x max_p below 0.05, 2 x below 0.5, else max_p.
double first_pass_p(double max_p);

struct change_point {
  std::size_t index = 0;  // the first value after the change
  double qhat = 0;        // E-Divisive's Q-hat where it was found
  std::size_t n_before = 0, n_after = 0;
  double mean_before = 0, mean_after = 0, sd_before = 0, sd_after = 0;
  double p = 1;  // two-sided, Student's t-test between the intervals on either side
  // mean_after / mean_before - 1
  double forward_change() const;
  // The larger of the relative changes forward and backward (Otava's change_magnitude).
  double magnitude() const;
};

struct change_point_result {
  std::vector<change_point> weak;    // after the split step, tested against the full series
  std::vector<change_point> strong;  // after the merge: the change points
};

// values: the series in order. sd_floor: empty, or one per value: how far that value alone is
// known (a run's median, from its own windows); used only with params.spread_floor.
change_point_result e_divisive(const std::vector<double>& values, const std::vector<double>& sd_floor,
                               const e_divisive_params& params);

// "window=50 max_p=0.001 ..." : every parameter, so a stored result can be recomputed.
std::string describe(const e_divisive_params& p);

}  // namespace trainbench
