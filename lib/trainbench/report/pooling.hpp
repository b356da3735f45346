#pragma once
// A ladder measures each rung in several rounds, each round a fresh process: the rounds' raw
// measurements are kept in a state file and pooled into one result (no torch here).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "trainbench/report/run_result.hpp"

namespace trainbench {

// Every number of a run_result, losslessly (the report itself keeps only summaries).
nlohmann::json run_result_to_json(const run_result& r);
run_result run_result_from_json(const nlohmann::json& j);

// One result from several rounds of the same profile: windows and per-batch stage times in
// round order; loss from the first round to the last; memory peaks the largest; skipped steps
// summed; each rank's all-reduce wait the median of its rounds' medians; stopped_by the last's.
run_result pool_rounds(const std::vector<run_result>& rounds);

// The rounds recorded in a state file (none when it does not exist) and the file with one more.
std::vector<run_result> read_rounds(const std::filesystem::path& state);
void write_rounds(const std::filesystem::path& state, const std::vector<run_result>& rounds);

}  // namespace trainbench
