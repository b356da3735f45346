#pragma once
// Student's t distribution and the two-sample t-test from summary figures (no torch here).
#include <cstddef>

namespace trainbench {

struct t_test {
  double t = 0, df = 0;
  double p = 1;  // two-sided
};

// Student's two-sample t-test with pooled variance, from each side's mean, standard deviation
// and size: what scipy.stats.ttest_ind_from_stats(equal_var=True) computes. Fewer than three
// values in all, or no spread and no difference, give p = 1; no spread with a difference, p = 0.
t_test pooled_t_test(double mean1, double sd1, std::size_t n1, double mean2, double sd2, std::size_t n2);

// P(|T| >= |t|) for Student's t with df degrees of freedom (df > 0).
double student_t_two_sided_p(double t, double df);

// The regularized incomplete beta function I_x(a, b), for 0 <= x <= 1 and a, b > 0.
double incomplete_beta(double x, double a, double b);

}  // namespace trainbench
