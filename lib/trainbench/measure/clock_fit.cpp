#include "trainbench/measure/clock_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace trainbench {

std::int64_t clock_map::to_host(double device_s) const { return origin_ns + std::llround(device_s * rate * 1e9); }

clock_map fit_clock(clock_point first, clock_point second, double device_s) {
  clock_map m;
  m.origin_ns = first.host_ns;
  const double host_s = static_cast<double>(second.host_ns - first.host_ns) * 1e-9;
  // Each device time is a float of milliseconds, off by up to 2^-24 of itself, and the fitted
  // rate inherits the window's own rounding: twice that, in host time (the rate scales it), and
  // 1 ns for llround.
  const auto rounding =
      static_cast<std::int64_t>(std::ceil(2.0 * std::max({0.0, device_s, host_s}) * 1e9 * 0x1p-24)) + 1;
  if (device_s > 0 && static_cast<double>(first.half_ns + second.half_ns) * 1e-9 < 1e-4 * device_s) {
    // Between the points the error is a weighted mean of the two points' errors.
    m.rate = host_s / device_s;
    m.bound_ns = std::max(first.half_ns, second.half_ns) + rounding;
    return m;
  }
  // One point: the error runs from the first point's to the second point's plus the drift seen
  // there.
  const std::int64_t miss = std::llabs(second.host_ns - m.to_host(device_s));
  m.bound_ns = std::max(first.half_ns, second.half_ns + miss) + rounding;
  return m;
}

}  // namespace trainbench
