#pragma once
// trainbench compare: regression verdicts between two sets of reports (no torch here).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace trainbench {

struct compare_request {
  std::string base, candidate;
  double threshold_pct = 3.0;
  double alpha = 0.05;
  std::string format = "text";
};

struct mann_whitney {
  double u = 0;  // U statistic of the first sample
  double p = 1;  // two-sided p-value
  bool exact = false;
};
// Exact distribution for small samples without ties; normal approximation with tie and
// continuity correction otherwise (what scipy.stats.mannwhitneyu does by default).
mann_whitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);
// The smallest two-sided p-value samples of these sizes can reach.
double smallest_p(std::size_t n, std::size_t m);

// Hodges-Lehmann estimate of the change from base to candidate (the median of all pairwise
// log-ratios) with its distribution-free confidence interval, the one the Mann-Whitney test
// inverts to; in percent. Empty when the samples are too small for this confidence.
struct change_interval {
  double estimate_pct = 0, low_pct = 0, high_pct = 0;
  double confidence = 0.95;
};
std::optional<change_interval> interval_of_change(const std::vector<double>& base, const std::vector<double>& candidate,
                                                  double confidence);

enum class verdict { faster, slower, same, ambiguous };
const char* to_string(verdict v);

struct pair_row {
  std::string name, match;              // match: "hash" or "name"
  std::vector<double> base, candidate;  // per-repeat samples/s
  double base_median = 0, candidate_median = 0, change_pct = 0;
  mann_whitney test;
  std::optional<change_interval> interval;  // at confidence 1 - alpha
  verdict result = verdict::ambiguous;
  std::string reason;
};

struct comparison {
  std::vector<pair_row> rows;
  std::vector<std::string> only_base, only_candidate, warnings;
  std::optional<double> geomean_ratio;
};

pair_row judge(pair_row row, double threshold_pct, double alpha);
comparison compare_reports(const std::vector<nlohmann::json>& base, const std::vector<nlohmann::json>& candidate,
                           double threshold_pct, double alpha);
// Reads one report or every *.json in a folder; throws input_error on unreadable files or
// a schema version this tool does not know.
std::vector<nlohmann::json> read_reports(const std::string& file_or_folder);
std::string format_comparison(const comparison& c, const std::string& format);
int compare_command(const compare_request& request);

}  // namespace trainbench
