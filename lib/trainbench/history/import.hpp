#pragma once
// Run reports read into history records: the series key, the environment, the windows with the
// process each came from, and where in the project's history the run belongs. No torch here.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainbench/history/store.hpp"

namespace trainbench {

// Where a run belongs: given on the command line, or found by detect_origin.
struct run_origin {
  std::string commit, branch, time;
};

// Fills what `given` leaves empty: commit and branch from the usual CI variables (GitHub
// Actions, GitLab CI, Buildkite, CircleCI, Jenkins), else from git in the working directory,
// else "unknown". time stays empty unless given: each run then takes its report's context.date.
run_origin detect_origin(const run_origin& given);

// ISO 8601 (2026-12-02T10:00:00Z, with an offset, or 2026-12-02 10:00:00 taken as UTC), a date
// alone, or Unix seconds, as "YYYY-MM-DDTHH:MM:SSZ"; input_error naming `what` otherwise.
std::string normalize_time(const std::string& text, const std::string& what);

// "gpu: NVIDIA H100 80GB HBM3 x 8" or "cpu: AMD EPYC, 2 cores": what one series is measured on.
std::string machine_class_of(const nlohmann::json& report);
// A series is one workload (report/identity.hpp's key: the non-default workload keys, the kind of
// measurement, the world size) on one machine class: its id is 16 hex digits of both.
std::string series_id_of(const std::string& workload_key, const std::string& machine_class);
struct series_key {
  std::string series_id, workload, machine_class, profile_hash;
};
// The series a report's run belongs to (history add, the gate, and the schema 3 migration).
series_key series_key_of(const nlohmann::json& report);

// One report as a run (with its windows and its JSON). Throws input_error naming `source` for an
// unknown schema version or a missing field.
run_record run_from_report(const std::string& text, const std::string& source, const run_origin& origin);

struct read_result {
  std::vector<run_record> runs;
  std::vector<std::string> skipped;  // JSON files in folders that are not run reports
};
// Every input is a report file or a folder whose *.json run reports are read (in natural order).
// All are read before anything is written: one bad report stops the whole add.
read_result read_runs(const std::vector<std::string>& inputs, const run_origin& origin);

}  // namespace trainbench
