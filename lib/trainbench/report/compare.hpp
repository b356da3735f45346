#pragma once
// trainbench compare: regression verdicts between two sets of reports (no torch here). The
// statistics are in measure/rank_test.hpp, the verdict rules in report/verdict.hpp.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/measure/rank_test.hpp"
#include "trainbench/report/identity.hpp"
#include "trainbench/report/verdict.hpp"

namespace trainbench {

struct compare_options {
  double threshold_pct = 3.0;
  double alpha = 0.05;
  bool family_correction = true;  // Holm's correction across the profiles compared
  evidence_level level = evidence_level::process;
};

struct compare_request {
  std::string base, candidate;
  compare_options options;
  std::string format = "text";
};

// A profile on both sides under the same name whose workloads differ: not compared.
struct unmatched_pair {
  std::string name;
  std::vector<std::string> differences;  // "train.batch_size: 32 vs 64"
};

struct comparison {
  std::vector<pair_row> rows;
  std::vector<std::string> only_base, only_candidate, warnings;
  std::vector<unmatched_pair> unmatched;  // same name, different profile
  std::vector<std::string> skipped;       // files in the folders that are not run reports
  std::optional<double> geomean_ratio;
  double threshold_pct = 3.0, alpha = 0.05;
  bool family_correction = true;
  evidence_level level = evidence_level::process;
  std::size_t family_size = 0;  // rows the correction ran over
};

// Several reports of one workload on a side (the same identity_of key: workload, measurement and
// world size) are pooled: each keeps its processes, so ten one-process runs are ten processes.
// A base and a candidate are matched by that key too, whatever their names, descriptions, report
// paths and measurement plans (measure.processes, windows, warmup).
comparison compare_reports(const std::vector<nlohmann::json>& base, const std::vector<nlohmann::json>& candidate,
                           const compare_options& options);
// Whether a JSON document is a run report (a folder of reports may hold other JSON:
// bottleneck.json, a ladder's table). compare and history read folders by this one rule.
bool is_run_report(const nlohmann::json& j);
// Reads one report or every *.json run report in a folder; throws input_error on unreadable
// files or a schema version this tool does not know. In a folder, JSON files that are not run
// reports (bottleneck.json) are left out and named in `skipped` when given.
std::vector<nlohmann::json> read_reports(const std::string& file_or_folder,
                                         std::vector<std::string>* skipped = nullptr);
// The keys whose values differ between two resolved profiles (YAML), as "key: a vs b".
std::vector<std::string> profile_differences(const std::string& base_yaml, const std::string& candidate_yaml);
std::string format_comparison(const comparison& c, const std::string& format);
int compare_command(const compare_request& request);

}  // namespace trainbench
