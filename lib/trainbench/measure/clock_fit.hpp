#pragma once
// Placing device timestamps on the host clock (no CUDA here, so the arithmetic is tested on a CPU).
#include <cstdint>

namespace trainbench {

// A reference event bracketed by host clock reads: the midpoint and half the bracket (ns).
struct clock_point {
  std::int64_t host_ns = 0, half_ns = 0;
};

// Device seconds since the first reference event -> host steady-clock ns.
struct clock_map {
  std::int64_t origin_ns = 0;  // where device time 0 lies on the host clock
  double rate = 1.0;           // host seconds per device second
  std::int64_t bound_ns = 0;   // how far a mapped time between the two points may be off
  std::int64_t to_host(double device_s) const;
};

// `device_s`: the device time from the first event to the second, as cudaEventElapsedTime gives
// it (float milliseconds). Fits the rate through both points when it is known to 100 ppm (the two
// half-brackets under 1e-4 of the window), so no span's length changes by more; otherwise keeps
// the first point alone and widens the bound by what the second point showed.
clock_map fit_clock(clock_point first, clock_point second, double device_s);

}  // namespace trainbench
