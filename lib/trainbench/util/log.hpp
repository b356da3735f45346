#pragma once
// Logging facade. Torch translation units log through this, never through spdlog directly:
// LibTorch bundles its own fmt headers, which must not meet the system fmt spdlog was built with.
#include <string>

namespace trainbench {

void log_info(const std::string& message);
void log_warn(const std::string& message);
void log_error(const std::string& message);
void set_log_quiet(bool quiet);  // -q: warnings, errors and log_result only
// Where the results went (the final report path): shown under -q too.
void log_result(const std::string& message);

}  // namespace trainbench
