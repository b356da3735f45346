#include "trainbench/measure/probe.hpp"

#include <sys/resource.h>

namespace trainbench {

std::int64_t host_peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void device_probe::fill(memory_result& memory, telemetry_result&) const {
  memory.host_peak_rss_bytes = host_peak_rss_bytes();
}

}  // namespace trainbench
