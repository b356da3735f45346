// Noise by level (one-way random-effects ANOVA) and Kalibera and Jones's plan for a budget.
#include <catch2/catch.hpp>
#include <cmath>

#include "trainbench/measure/variance.hpp"

using namespace trainbench;

TEST_CASE("the variance split of a balanced design, by hand") {
  // Groups {1,2,3}, {4,5,6}, {7,8,9}: MSW = 1, group means 2, 5, 8 around 5, MSB = 3 * 18 / 2 = 27,
  // n0 = 3, so the between variance is (27 - 1) / 3.
  const auto s = split_variance({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  CHECK(s.processes == 3);
  CHECK(s.windows == 9);
  CHECK(s.grand_mean == Approx(5));
  REQUIRE(s.within_sd);
  REQUIRE(s.between_sd);
  CHECK(*s.within_sd == Approx(1.0 / 5));
  CHECK(*s.between_sd == Approx(std::sqrt(26.0 / 3) / 5));
  CHECK(*s.icc == Approx((26.0 / 3) / (26.0 / 3 + 1)));
}

TEST_CASE("the variance split of an unbalanced design, and what it cannot know") {
  // Reference values from the ANOVA formulas with n0 = (N - sum n_i^2 / N) / (k - 1):
  // groups of 2, 3 and 4; N = 9, n0 = (9 - 29/9) / 2 = 26/9.
  const auto s = split_variance({{10, 12}, {20, 21, 22}, {15, 15, 16, 18}});
  const double grand = (22.0 + 63 + 64) / 9;
  const double ssw = 2.0 + 2.0 + 6.0;  // each group around its own mean (11, 21, 16)
  const double ssb = 2 * std::pow(11 - grand, 2) + 3 * std::pow(21 - grand, 2) + 4 * std::pow(16 - grand, 2);
  const double msw = ssw / 6, msb = ssb / 2, n0 = 26.0 / 9;
  CHECK(s.grand_mean == Approx(grand));
  CHECK(*s.within_sd == Approx(std::sqrt(msw) / grand));
  CHECK(*s.between_sd == Approx(std::sqrt((msb - msw) / n0) / grand));
  // One process: nothing between. One window each: nothing within, so the levels cannot be split.
  const auto one = split_variance({{1, 2, 3}});
  CHECK(one.within_sd);
  CHECK_FALSE(one.between_sd);
  const auto singles = split_variance({{1}, {2}, {3}});
  CHECK_FALSE(singles.within_sd);
  CHECK_FALSE(singles.between_sd);
  // Processes that agree more than their windows would suggest: between is 0, not negative.
  const auto quiet = split_variance({{1, 3}, {1, 3}, {1, 3}});
  CHECK(*quiet.between_sd == 0);
  CHECK(*quiet.icc == 0);
}

TEST_CASE("windows are grouped by the process they came from, and ranked by its median") {
  const auto groups = group_by_process({5, 1, 7, 2, 9}, {3, 0, 3, 0, 3});
  REQUIRE(groups.size() == 2);
  CHECK(groups[0] == std::vector<double>{5, 7, 9});
  CHECK(groups[1] == std::vector<double>{1, 2});
  CHECK(process_medians(groups) == std::vector<double>{7, 1.5});
  CHECK(group_by_process({1, 2}, {}).size() == 1);  // no ids: one process
}

TEST_CASE("a budget buys the plan with the narrowest interval, found exhaustively") {
  // Kalibera and Jones's optimum: sqrt(3 x 0.06^2 / (0.3 x 0.05^2)) = 3.79 windows per process.
  const double within = 0.06, between = 0.05, process_s = 3, window_s = 0.3, budget = 600;
  REQUIRE(optimal_windows(within, between, process_s, window_s));
  CHECK(*optimal_windows(within, between, process_s, window_s) == Approx(std::sqrt(3 * 0.0036 / (0.3 * 0.0025))));
  CHECK_FALSE(optimal_windows(within, 0, process_s, window_s));
  const auto plans = plans_within(within, between, process_s, window_s, budget, 4);
  REQUIRE_FALSE(plans.empty());
  const repetition_plan& best = plans.front();
  CHECK(best.seconds <= budget);
  CHECK(best.processes >= 4);
  // No plan that fits does better: variance of the grand mean between^2 / P + within^2 / (P n).
  const auto variance = [&](int p, int n) { return (between * between + within * within / n) / p; };
  for (int p = 4; p * (process_s + window_s) <= budget; ++p)
    for (int n = min_windows_per_process; p * (process_s + n * window_s) <= budget; ++n)
      CHECK(variance(best.processes, best.windows_per_process) <= variance(p, n) * (1 + 1e-12));
  // It lands near the continuous optimum.
  CHECK(std::abs(best.windows_per_process - 3.79) < 1.5);
  // Two runs of the plan: the interval of their change, wider by sqrt(pi/3) than the normal one on means.
  CHECK(best.half_width == Approx(1.959964 * best.unit_sd * std::sqrt(2.0 / best.processes) * std::sqrt(M_PI / 3)));
  CHECK(best.detectable > best.half_width);
  // A budget that cannot fit 4 processes of two windows buys nothing.
  CHECK(plans_within(within, between, process_s, window_s, 4 * 3.6 - 0.01, 4).empty());
  CHECK(plans_within(within, between, process_s, window_s, 4 * 3.6 + 0.01, 4).size() == 1);
  // Where processes are all the noise, the optimum is one window; plans keep two, so a run still
  // measures both levels.
  CHECK(plans_within(0.001, 0.05, process_s, window_s, budget, 4).front().windows_per_process ==
        min_windows_per_process);
}
