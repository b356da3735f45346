#pragma once
// The JSON report: versioned, with the context needed to trust and compare it (no torch here).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "trainbench/config/profile.hpp"
#include "trainbench/report/run_result.hpp"

namespace trainbench {

constexpr int report_schema_version = 1;

struct gpu_info {
  std::string name, uuid, driver;
  std::int64_t memory_bytes = 0;
};

struct context_info {
  std::string date, host, cpu_model;
  int cpu_cores = 0;
  std::optional<gpu_info> gpu;
  std::string libtorch, cuda = "none", cudnn = "none", build_type, command_line;
  bool data_generated = false;
  bool nvtx = false;
};

struct report_input {
  std::string tool_name = "trainbench";
  // What was measured, part of a report's identity in compare: "run", "bench-data",
  // "bottleneck-loop" or "bottleneck-ceiling".
  std::string measurement = "run";
  std::string status = "ok";  // ok | error | interrupted
  std::string error_kind, error_message;
  context_info context;
  profile prof;
  std::string profile_path;
  effective_settings effective;
  std::int64_t parameters = 0;
  run_result result;
};

nlohmann::ordered_json make_report(const report_input& in);
// The report's results.compute: model FLOP/s achieved and the share of the GPU's peak (null
// without a model or a finished window).
nlohmann::ordered_json compute_block(const report_input& in);
// Host facts (date, host name, CPU model and cores); the caller adds library versions.
context_info host_context(const std::string& command_line);
std::string tool_version();
std::string tool_git();

}  // namespace trainbench
