#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>

#include "trainbench/measure/clock_fit.hpp"

using namespace trainbench;

namespace {

// A device clock running `rate` host seconds per device second from host time t0, read as
// cudaEventElapsedTime reads it: float milliseconds.
struct true_clocks {
  std::int64_t t0;
  double rate;
  std::int64_t host(double device_s) const { return t0 + std::llround(device_s * rate * 1e9); }
};

double as_event(double device_s) { return static_cast<float>(device_s * 1000.0) / 1000.0; }

// The largest error of the map over the window, at 1001 device times.
std::int64_t worst_error(const clock_map& m, const true_clocks& c, double window_s) {
  std::int64_t worst = 0;
  for (int i = 0; i <= 1000; ++i) {
    const double d = window_s * i / 1000;
    worst = std::max<std::int64_t>(worst, std::llabs(m.to_host(as_event(d)) - c.host(d)));
  }
  return worst;
}

}  // namespace

TEST_CASE("clock fit: a 60 s window of a clock 50 ppm fast stays within its brackets, where one point drifts 3 ms") {
  const true_clocks c{1'000'000'000'000, 1.0 + 50e-6};
  const double window = 60.0;
  const std::int64_t half = 20'000;  // 20 us brackets
  for (const int e0 : {-1, 0, 1})
    for (const int e1 : {-1, 0, 1}) {
      INFO("bracket errors " << e0 << ", " << e1);
      const clock_point first{c.t0 + e0 * half, half}, second{c.host(window) + e1 * half, half};
      const clock_map m = fit_clock(first, second, as_event(window));
      CHECK(m.rate == Approx(c.rate).epsilon(1e-6));
      CHECK(m.bound_ns < half + 10'000);  // the bracket plus float milliseconds' rounding
      CHECK(worst_error(m, c, window) <= m.bound_ns);
      // The same clocks through the first point alone: what the fit saves.
      const clock_map one_point{first.host_ns, 1.0, half};
      CHECK(worst_error(one_point, c, window) > 2'900'000);
    }
}

TEST_CASE("clock fit: a window too short to know the rate to 100 ppm keeps one point, with a bound that holds") {
  const double window = 0.05;        // 50 ms
  const std::int64_t half = 20'000;  // 20 us: the rate would be known to 800 ppm only
  for (const double rate : {1.0, 1.0 + 300e-6, 1.0 - 300e-6}) {
    INFO("rate " << rate);
    const true_clocks c{5'000'000'000, rate};
    for (const int e1 : {-1, 1}) {
      const clock_point first{c.t0 + half, half}, second{c.host(window) + e1 * half, half};
      const clock_map m = fit_clock(first, second, as_event(window));
      CHECK(m.rate == 1.0);
      CHECK(worst_error(m, c, window) <= m.bound_ns);
      CHECK(m.bound_ns <= 3 * half + std::llround(300e-6 * window * 1e9) + 100);
    }
  }
  // An empty window: nothing to fit; the miss (2) widens the second bracket (4), plus 2 ns of
  // rounding.
  const clock_map m = fit_clock({7, 3}, {9, 4}, 0.0);
  CHECK(m.rate == 1.0);
  CHECK(m.to_host(0.0) == 7);
  CHECK(m.bound_ns == 8);
}

TEST_CASE("clock fit: the bound covers float milliseconds' rounding and the wider of two unequal brackets") {
  const true_clocks c{3'000'000'000, 1.0 + 50e-6};
  // 262144.0156251 ms rounds up to ...0.03125 as a float, and a time just before it rounds down:
  // without the rounding term (scaled by the rate) the error passes the brackets' bound.
  const double window = 262.1440156251;
  const std::int64_t half = 20'000;
  const clock_point first{c.t0 - half, half}, second{c.host(window) - half, half};
  const clock_map m = fit_clock(first, second, as_event(window));
  REQUIRE(m.rate != 1.0);
  for (const double d : {window - 2e-10, window, window / 2, 0.0}) {
    INFO("device time " << d);
    CHECK(std::llabs(m.to_host(as_event(d)) - c.host(d)) <= m.bound_ns);
  }
  CHECK(m.bound_ns > half);
  // The second point's bracket is the wider: the bound is its, not the first's.
  for (const int e1 : {-1, 1}) {
    const true_clocks u{3'000'000'000, 1.0 - 20e-6};
    const clock_point narrow{u.t0 + 5'000, 5'000}, wide{u.host(10.0) + e1 * 20'000, 20'000};
    const clock_map w = fit_clock(narrow, wide, as_event(10.0));
    REQUIRE(w.rate != 1.0);
    CHECK(w.bound_ns >= 20'000);
    CHECK(worst_error(w, u, 10.0) <= w.bound_ns);
    CHECK(worst_error(w, u, 10.0) > 15'000);  // the wide end's error is there to be covered
  }
}
