#pragma once
// Device-side facts the runner needs at window edges: memory peaks and telemetry.
#include <memory>

#include "trainbench/report/run_result.hpp"

namespace trainbench {

class device_probe {
 public:
  virtual ~device_probe() = default;
  virtual void reset_peaks() {}
  virtual void start_sampling() {}
  virtual void stop_sampling() {}
  virtual void fill(memory_result& memory, telemetry_result& telemetry) const;
};

std::int64_t host_peak_rss_bytes();

}  // namespace trainbench
