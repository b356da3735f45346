#pragma once
// trainbench ladder: run rungs in order, then the article's summary table, ladder.md and ladder.svg.
#include <optional>
#include <string>
#include <vector>

namespace trainbench {

struct ladder_request {
  std::vector<std::string> inputs;  // a folder of profiles, or profile files
  std::string out = "reports/ladder";
  std::vector<std::string> sets;
  bool quiet = false;
  std::string command_line;
};

struct ladder_rung {
  std::string rung, change;             // file stem, description
  std::optional<double> samples_per_s;  // median; empty when the rung failed
  std::string failure;
  std::vector<double> windows;  // samples/s per measured window: the interval of each step
};

std::vector<std::string> ladder_profiles(const std::vector<std::string>& inputs);
std::string ladder_markdown(const std::vector<ladder_rung>& rungs);
std::string ladder_svg(const std::vector<ladder_rung>& rungs, const std::string& title);
int ladder_command(const ladder_request& request);

}  // namespace trainbench
