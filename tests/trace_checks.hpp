#pragma once
// What every trace must satisfy, checked on the parsed JSON (shared by the CPU, GPU and
// two-rank tests), and an XML check for the charts.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tbtest {

struct trace_facts {
  std::vector<std::string> errors;        // empty: the structure holds
  std::map<std::string, double> stage_s;  // measured stage spans (cat "stage"), summed per name
  std::map<std::string, int> stage_n;     // and counted
  std::map<std::string, std::map<std::string, double>> lane_stage_s;  // per lane name
  std::vector<std::string> lanes;                                     // thread names, in file order
  int worker_lanes = 0;                                               // lanes named "loader worker N"
  int flows = 0;                                                      // complete flows (start and end)
  std::map<std::string, int> counters;                                // counter events per track name
  std::map<std::string, int> load_spans;                              // worker-side spans (cat "load") per name
  std::vector<int> pids;
};

// Checks: every span has a non-negative duration; on one lane spans never partly overlap (they
// are disjoint or one holds the other); every stage span lies within its batch's span on its lane, and a batch's stages
// start in the runner's order; every phase lies within its fill.
trace_facts check_trace(const nlohmann::json& trace);

// The number of <g class="cls"> in an SVG, read by a real XML parser (Python's ElementTree);
// -1 when the file is not well-formed XML.
int svg_groups(const std::filesystem::path& svg, const std::string& cls);

}  // namespace tbtest
