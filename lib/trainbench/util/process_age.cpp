#include "trainbench/util/process_age.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace trainbench {

double seconds_since_process_start() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (start_ticks == 0 || ticks_per_s <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  const double since_boot = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  return since_boot - static_cast<double>(start_ticks) / static_cast<double>(ticks_per_s);
}

}  // namespace trainbench
