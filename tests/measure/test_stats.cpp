#include <catch2/catch.hpp>

#include "trainbench/measure/stats.hpp"

using namespace trainbench;

TEST_CASE("quantiles interpolate linearly between order statistics") {
  const std::vector<double> v{7, 1, 3, 5};  // sorted: 1 3 5 7
  CHECK(quantile(v, 0.5) == Approx(4.0));
  CHECK(quantile(v, 0.25) == Approx(2.5));
  CHECK(quantile(v, 0.75) == Approx(5.5));
  CHECK(quantile(v, 0.0) == Approx(1.0));
  CHECK(quantile(v, 1.0) == Approx(7.0));
  CHECK(quantile({42}, 0.3) == Approx(42));
}

TEST_CASE("summary by hand") {
  const summary s = summarize({2, 4, 4, 4, 5, 5, 7, 9});
  CHECK(s.n == 8);
  CHECK(s.mean == Approx(5.0));
  CHECK(s.median == Approx(4.5));
  CHECK(s.min == 2);
  CHECK(s.max == 9);
  // Sample standard deviation: sum of squares 32 over 7.
  CHECK(s.stdev == Approx(std::sqrt(32.0 / 7.0)));
  CHECK(s.cv == Approx(std::sqrt(32.0 / 7.0) / 5.0));
  CHECK(summarize({3}).stdev == 0);
  CHECK(summarize({}).n == 0);
}
