#pragma once
// trainbench bottleneck: is this loop input-bound? The profile as written against the same step
// fed one reused device batch (no loading, no transfer): the gap is what input costs.
// No torch here: this is the verdict and its wording, tested on constructed samples.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/report/verdict.hpp"

namespace trainbench {

struct bottleneck_input {
  std::vector<double> loop, ceiling;  // samples/s per measured window
  double data_wait_s = 0, h2d_s = 0;  // the loop's medians per batch
  double batch_s = 0;                 // the loop's median batch time
  bool cuda = false;
  int rounds = 0;
};

enum class bound { input, compute, ambiguous, unexpected };
const char* to_string(bound b);

struct bottleneck_finding {
  pair_row row;  // base = ceiling, candidate = loop
  bound result = bound::ambiguous;
  double share_of_ceiling = 0;  // loop median / ceiling median
  std::string explanation;
  std::vector<std::string> hints;  // switches of this profile that attack the measured cost
};

bottleneck_finding judge_bottleneck(const bottleneck_input& in, const profile& p, double threshold_pct, double alpha);
std::string format_bottleneck(const bottleneck_finding& f, const bottleneck_input& in, const std::string& name);
nlohmann::ordered_json bottleneck_json(const bottleneck_finding& f, const bottleneck_input& in,
                                       const std::string& name);

}  // namespace trainbench
