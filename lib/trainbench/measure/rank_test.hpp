#pragma once
// Rank statistics for two samples of window rates (no torch here): the Mann-Whitney U test, the
// Hodges-Lehmann interval it inverts to, and Holm's correction over a family of such tests.
#include <cstddef>
#include <optional>
#include <vector>

namespace trainbench {

// Up to this many windows on each side, p-values come from the exact distribution.
constexpr std::size_t exact_limit = 20;

struct mann_whitney {
  double u = 0;        // U statistic of the first sample: the pairs it wins, a tie counting one half
  double p = 1;        // two-sided p-value
  bool exact = false;  // from the exact distribution (given the ties), not the normal approximation
  bool ties = false;   // some windows have equal rates
};

// With at most exact_limit windows per side: the exact distribution of U over all arrangements
// of the pooled windows, conditional on their ties (a dynamic programme over the groups of tied
// midranks; without ties the classical distribution). Beyond that: the normal approximation with
// tie and continuity correction. Two-sided p = min(1, 2 * the smaller tail).
// How this relates to scipy.stats.mannwhitneyu: its default ("auto") is exact only when the
// smaller sample has at most 8 values and there are no ties, and asymptotic otherwise; its
// "exact" ignores ties. Without ties ours equals method="exact" up to 20 windows and
// method="asymptotic" beyond; with ties it equals scipy.stats.permutation_test over all
// arrangements with the U statistic.
mann_whitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

// The smallest two-sided p-value samples of these sizes can reach (without ties; ties only raise it).
double smallest_p(std::size_t n, std::size_t m);

// The fewest windows per side whose most extreme outcome reaches p below alpha, and that p.
struct windows_reach {
  std::size_t per_side = 0;
  double p = 1;
};
std::optional<windows_reach> windows_to_reach(double alpha);

// Hodges-Lehmann estimate of the change from base to candidate (the median of all pairwise
// log-ratios) with its distribution-free confidence interval, the one the Mann-Whitney test
// inverts to; in percent. The interval's order statistics come from U's distribution without
// ties (exact up to exact_limit, normal beyond). Empty when the samples are too small for this
// confidence, or a rate is not positive.
struct change_interval {
  double estimate_pct = 0, low_pct = 0, high_pct = 0;
  double confidence = 0.95;
};
std::optional<change_interval> interval_of_change(const std::vector<double>& base, const std::vector<double>& candidate,
                                                  double confidence);

// Holm's step-down adjusted p-values, in the order given: rejecting where the adjusted p is
// below alpha keeps the chance of any false rejection in the family at most alpha.
std::vector<double> holm_adjust(const std::vector<double>& p);

// The standard normal quantile (inverse of the distribution function), for 0 < q < 1.
double normal_quantile(double q);

}  // namespace trainbench
