#pragma once
// A trace-event JSON file read back into lanes, spans, counters and flows: what the timeline
// chart draws (and what the tests check a trace by). Torch-free.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainbench {

struct trace_span {
  std::string name, cat;
  double ts_us = 0, dur_us = 0;
  std::int64_t batch = -1;      // args.batch, where given
  std::int64_t for_batch = -1;  // args.for_batch: data_wait and h2d fetch or copy this batch's data
  int slot = -1;                // args.slot, where given
  int depth = 0;                // nesting level within its lane (0: outermost)
  double end_us() const { return ts_us + dur_us; }
};

struct trace_lane {
  int tid = 0;
  int sort_index = 0;
  std::string name;
  std::vector<trace_span> spans;  // sorted by start, a parent before its children
};

struct trace_counter {
  std::string name;                               // "<event name> <series>", as Perfetto names it
  std::vector<std::pair<double, double>> points;  // (ts_us, value), sorted by time
};

struct trace_flow {
  std::int64_t id = 0;
  int from_tid = 0, to_tid = 0;
  double from_us = 0, to_us = 0;
};

struct trace_model {
  std::string process;
  std::vector<trace_lane> lanes;  // by sort index
  std::vector<trace_counter> counters;
  std::vector<trace_flow> flows;    // start to end (steps between are dropped)
  std::vector<trace_span> windows;  // the "measured window" spans
  const trace_lane* lane(const std::string& name) const;
};

// Throws input_error naming `source` when the text is not a trace-event JSON file.
trace_model read_trace(const std::string& text, const std::string& source);

// The half-open batch range A:B (A <= batch < B) of a --batches option; throws input_error.
struct batch_range {
  std::int64_t first = 0, end = 0;
};
batch_range parse_batch_range(const std::string& text);

// Start and end (us) of batches [first, end) over every lane; false when the trace has none.
bool batch_extent(const trace_model& m, const batch_range& r, double& t0, double& t1);
// The batches whose "batch" span the trace holds, in order.
std::vector<std::int64_t> traced_batches(const trace_model& m);

}  // namespace trainbench
