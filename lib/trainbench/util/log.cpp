#include "trainbench/util/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace trainbench {
namespace {
spdlog::logger& logger() {
  // stderr, so that stdout carries only results (tables, YAML, JSON) and can be piped.
  static auto instance = [] {
    auto l = spdlog::stderr_color_mt("trainbench");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    return l;
  }();
  return *instance;
}
bool g_quiet = false;
}  // namespace

void log_info(const std::string& message) {
  if (!g_quiet) logger().info(message);
}
void log_result(const std::string& message) { logger().info(message); }
void log_warn(const std::string& message) { logger().warn(message); }
void log_error(const std::string& message) { logger().error(message); }
void set_log_quiet(bool quiet) { g_quiet = quiet; }

}  // namespace trainbench
