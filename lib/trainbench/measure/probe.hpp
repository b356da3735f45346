#pragma once
// Device-side facts the runner needs at window edges: memory peaks and telemetry.
#include <cstdint>
#include <memory>
#include <vector>

#include "trainbench/report/run_result.hpp"

namespace trainbench {

// One telemetry reading for a trace's counter tracks; negative where NVML has no value.
struct telemetry_sample {
  std::int64_t at_ns = 0;  // host steady clock
  double gpu_util_pct = -1, sm_clock_mhz = -1, power_w = -1;
};

class device_probe {
 public:
  virtual ~device_probe() = default;
  virtual void reset_peaks() {}
  virtual void start_sampling() {}
  virtual void stop_sampling() {}
  virtual void fill(memory_result& memory, telemetry_result& telemetry) const;
  // For a trace: keep up to `capacity` readings between take_samples() calls (preallocated;
  // later readings are dropped and counted). Probes without a sampler keep nothing.
  virtual void keep_samples(std::size_t /*capacity*/) {}
  // Moves the kept readings out; returns how many were dropped since the last call.
  virtual std::size_t take_samples(std::vector<telemetry_sample>& /*out*/) { return 0; }
};

std::int64_t host_peak_rss_bytes();

}  // namespace trainbench
