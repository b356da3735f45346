#pragma once
// trainbench timeline: a static Gantt chart (SVG) of a few batches of a --trace file, for PR
// comments and docs where nobody opens a trace viewer. Torch-free.
#include <string>

#include "trainbench/timeline/trace_model.hpp"

namespace trainbench {

struct timeline_request {
  std::string trace;  // a --trace file
  std::string out = "timeline.svg";
  std::string batches;  // "A:B" (A <= batch < B); default: the first three traced batches
};

// One <g class="lane"> per thread or stream, one <g class="counter"> per counter track.
std::string timeline_svg(const trace_model& m, const batch_range& r);
// The default range: the first three batches the trace holds.
batch_range default_batches(const trace_model& m);
int timeline_command(const timeline_request& request);

}  // namespace trainbench
