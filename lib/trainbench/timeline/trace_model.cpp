#include "trainbench/timeline/trace_model.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "trainbench/util/error.hpp"

namespace trainbench {

using json = nlohmann::json;

namespace {

std::int64_t int_arg(const json& e, const char* key) {
  const auto args = e.find("args");
  if (args == e.end() || !args->is_object()) return -1;
  const auto v = args->find(key);
  return v != args->end() && v->is_number_integer() ? v->get<std::int64_t>() : -1;
}

// Nesting depth per lane: spans sorted by start (longer first), a stack of open ends.
void assign_depths(trace_lane& lane) {
  std::sort(lane.spans.begin(), lane.spans.end(), [](const trace_span& a, const trace_span& b) {
    if (a.ts_us != b.ts_us) return a.ts_us < b.ts_us;
    return a.dur_us > b.dur_us;
  });
  std::vector<double> open;
  constexpr double eps = 1e-6;  // the file's ns resolution read back as doubles
  for (auto& s : lane.spans) {
    while (!open.empty() && open.back() <= s.ts_us + eps) open.pop_back();
    s.depth = static_cast<int>(open.size());
    open.push_back(s.end_us());
  }
}

}  // namespace

const trace_lane* trace_model::lane(const std::string& name) const {
  for (const auto& l : lanes)
    if (l.name == name) return &l;
  return nullptr;
}

trace_model read_trace(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    throw input_error(source + ": not JSON (" + std::string(e.what()) + ")");
  }
  const json* events = nullptr;
  if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array()) events = &doc["traceEvents"];
  if (doc.is_array()) events = &doc;
  if (!events) throw input_error(source + ": not a trace-event file (expected an object with a traceEvents array)");

  trace_model m;
  std::map<int, trace_lane> lanes;
  std::map<std::string, trace_counter> counters;
  std::map<std::int64_t, trace_flow> flows;
  std::set<std::int64_t> flow_starts, flow_ends;
  for (const json& e : *events) {
    if (!e.is_object() || !e.contains("ph") || !e["ph"].is_string()) continue;
    const std::string ph = e["ph"].get<std::string>();
    const int tid = e.value("tid", 0);
    const std::string name = e.value("name", "");
    if (ph == "M") {
      const auto found = e.find("args");
      const json args = found != e.end() && found->is_object() ? *found : json::object();
      if (name == "process_name") m.process = args.value("name", "");
      if (name == "thread_name") {
        lanes[tid].tid = tid;
        lanes[tid].name = args.value("name", "");
      }
      if (name == "thread_sort_index") lanes[tid].sort_index = args.value("sort_index", 0);
    } else if (ph == "X") {
      trace_span s;
      s.name = name;
      s.cat = e.value("cat", "");
      s.ts_us = e.value("ts", 0.0);
      s.dur_us = e.value("dur", 0.0);
      s.batch = int_arg(e, "batch");
      s.for_batch = int_arg(e, "for_batch");
      s.slot = static_cast<int>(int_arg(e, "slot"));
      if (s.cat == "window") {
        s.batch = int_arg(e, "first_batch");
        m.windows.push_back(s);
        continue;
      }
      lanes[tid].tid = tid;
      lanes[tid].spans.push_back(s);
    } else if (ph == "C") {
      const auto args = e.find("args");
      if (args == e.end() || !args->is_object()) continue;
      for (const auto& [key, value] : args->items()) {
        if (!value.is_number()) continue;
        trace_counter& c = counters[name + " " + key];
        c.name = name + " " + key;
        c.points.emplace_back(e.value("ts", 0.0), value.get<double>());
      }
    } else if (ph == "s" || ph == "f") {
      const std::int64_t id = e.value("id", std::int64_t{-1});
      trace_flow& f = flows[id];
      f.id = id;
      if (ph == "s") {
        f.from_tid = tid;
        f.from_us = e.value("ts", 0.0);
        flow_starts.insert(id);
      } else {
        f.to_tid = tid;
        f.to_us = e.value("ts", 0.0);
        flow_ends.insert(id);
      }
    }
  }
  for (auto& [tid, lane] : lanes) {
    if (lane.name.empty()) lane.name = "thread " + std::to_string(tid);
    assign_depths(lane);
    m.lanes.push_back(std::move(lane));
  }
  std::stable_sort(m.lanes.begin(), m.lanes.end(),
                   [](const trace_lane& a, const trace_lane& b) { return a.sort_index < b.sort_index; });
  for (auto& [name, c] : counters) {
    std::sort(c.points.begin(), c.points.end());
    m.counters.push_back(std::move(c));
  }
  for (const auto& [id, f] : flows)
    if (flow_starts.count(id) && flow_ends.count(id)) m.flows.push_back(f);
  return m;
}

batch_range parse_batch_range(const std::string& text) {
  const auto colon = text.find(':');
  auto number = [&](const std::string& part) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v < 0)
      throw input_error("--batches '" + text + "': expected A:B with batch numbers 0 <= A < B");
    return static_cast<std::int64_t>(v);
  };
  if (colon == std::string::npos) throw input_error("--batches '" + text + "': expected A:B (batches A to B - 1)");
  batch_range r{number(text.substr(0, colon)), number(text.substr(colon + 1))};
  if (r.end <= r.first) throw input_error("--batches '" + text + "': B must be greater than A (A:B is A to B - 1)");
  return r;
}

bool batch_extent(const trace_model& m, const batch_range& r, double& t0, double& t1) {
  bool any = false;
  for (const auto& lane : m.lanes) {
    for (const auto& s : lane.spans) {
      if (s.name != "batch" || s.batch < r.first || s.batch >= r.end) continue;
      t0 = any ? std::min(t0, s.ts_us) : s.ts_us;
      t1 = any ? std::max(t1, s.end_us()) : s.end_us();
      any = true;
    }
  }
  return any;
}

std::vector<std::int64_t> traced_batches(const trace_model& m) {
  std::set<std::int64_t> out;
  for (const auto& lane : m.lanes)
    for (const auto& s : lane.spans)
      if (s.name == "batch" && s.batch >= 0) out.insert(s.batch);
  return {out.begin(), out.end()};
}

}  // namespace trainbench
