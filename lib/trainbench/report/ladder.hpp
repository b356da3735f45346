#pragma once
// The ladder's summary: the article's table (ladder.md) and a bar chart (ladder.svg). The
// command that climbs it is commands/ladder.cpp.
#include <optional>
#include <string>
#include <vector>

#include "trainbench/report/ladder_reference.hpp"

namespace trainbench {

struct ladder_rung {
  std::string rung, change;             // file stem, description
  std::optional<double> samples_per_s;  // median; empty when the rung failed
  std::string failure;
  std::vector<double> windows;  // samples/s per measured window
  // What ran differently from what the rung's file (and so its description) says: --set
  // overrides, a device other than the one asked for.
  std::vector<std::string> as_run;
  // The keys this rung changes over the one before that had no effect here, with the reason;
  // when they are all of its changes, the rung measured nothing new.
  std::vector<std::string> no_effect;
  bool without_effect = false;
  std::vector<int> processes;  // the process of each window: a step's test ranks process medians
};

std::vector<std::string> ladder_profiles(const std::vector<std::string>& inputs);
std::string ladder_markdown(const std::vector<ladder_rung>& rungs);
// One <g class="rung"> per rung: the median bar, the windows' IQR whisker, the speed-up over the
// first rung, and a marker at the rung's reference samples/s where `reference` has one.
std::string ladder_svg(const std::vector<ladder_rung>& rungs, const std::string& title,
                       const ladder_reference& reference = {}, const std::string& reference_source = "");

}  // namespace trainbench
