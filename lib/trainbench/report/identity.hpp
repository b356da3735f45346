#pragma once
// What a report measured, as compare, plan and history tell their series apart (no torch here):
// one function, so that a profile renamed, described anew, written to another path or measured
// with another plan (measure.processes, windows, warmup) is still the same workload everywhere.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainbench {

struct workload_identity {
  // "key: value" for each workload key of the resolved profile whose value is not this
  // trainbench's default, in key order: what changes the measured work. Left out: name,
  // description, report.*, measure.* (the measurement plan), dist.timeout_s and
  // dist.heartbeat_timeout_s (how long to wait, not what is run). A key a newer release adds
  // with its default value changes nothing; a key this trainbench does not know is kept.
  std::vector<std::string> keys;
  std::string workload;     // 16 hex digits over `keys` (or over the report's hashes, below)
  std::string measurement;  // run | bench-data | bottleneck-loop | bottleneck-ceiling
  int world_size = 1;       // the data-parallel job's world size (1: one process)
  bool from_resolved = true;  // false: the report held no resolved profile; workload is its workload_hash (or hash)
  // The series key: workload, measurement and world size, as 16 hex digits.
  std::string key() const;
};

// The identity of one run report (schema 1). Reports without `profile.resolved` (or with text
// that is not YAML) fall back to `profile.workload_hash`, else `profile.hash`.
workload_identity identity_of(const nlohmann::json& report);

// What a report measured: "run", "bench-data", "bottleneck-loop" or "bottleneck-ceiling"
// (reports before the field: "bench-data" when they had no model, else "run").
std::string measurement_of(const nlohmann::json& report);
// The data-parallel job's world size, 1 for a one-process run. A run whose ranks could not be
// gathered (ranks_in_results below it) keeps its job's size: it is that job, measured in part.
int world_size_of(const nlohmann::json& report);

// The measurement-plan keys left out of the identity, as key prefixes ("measure" is measure.*).
const std::vector<std::string>& non_workload_keys();

}  // namespace trainbench
