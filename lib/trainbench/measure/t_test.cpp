#include "trainbench/measure/t_test.hpp"

#include <cmath>
#include <limits>

#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// The continued fraction of I_x(a, b) by the modified Lentz method; converges fast for
// x < (a + 1) / (a + b + 2).
double beta_fraction(double x, double a, double b) {
  constexpr double tiny = 1e-300;
  constexpr double eps = 1e-16;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 1000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    for (int half = 0; half < 2; ++half) {
      d = 1 + aa * d;
      if (std::fabs(d) < tiny) d = tiny;
      c = 1 + aa / c;
      if (std::fabs(c) < tiny) c = tiny;
      d = 1 / d;
      h *= d * c;
      aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    }
    if (std::fabs(d * c - 1) < eps) break;
  }
  return h;
}

}  // namespace

double incomplete_beta(double x, double a, double b) {
  TB_ASSERT(a > 0 && b > 0, "incomplete_beta needs a, b > 0");
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(log_front) * beta_fraction(x, a, b) / a;
  return 1 - std::exp(log_front) * beta_fraction(1 - x, b, a) / b;
}

double student_t_two_sided_p(double t, double df) {
  TB_ASSERT(df > 0, "Student's t needs df > 0");
  if (std::isinf(t)) return 0;
  return incomplete_beta(df / (df + t * t), df / 2, 0.5);
}

t_test pooled_t_test(double mean1, double sd1, std::size_t n1, double mean2, double sd2, std::size_t n2) {
  t_test out;
  if (n1 + n2 <= 2 || n1 == 0 || n2 == 0) return out;
  out.df = static_cast<double>(n1 + n2 - 2);
  const double pooled_var =
      ((static_cast<double>(n1) - 1) * sd1 * sd1 + (static_cast<double>(n2) - 1) * sd2 * sd2) / out.df;
  const double se = std::sqrt(pooled_var * (1.0 / static_cast<double>(n1) + 1.0 / static_cast<double>(n2)));
  const double diff = mean1 - mean2;
  if (se == 0) {
    out.t = diff == 0 ? 0 : std::copysign(std::numeric_limits<double>::infinity(), diff);
    out.p = diff == 0 ? 1 : 0;
    return out;
  }
  out.t = diff / se;
  out.p = student_t_two_sided_p(out.t, out.df);
  return out;
}

}  // namespace trainbench
