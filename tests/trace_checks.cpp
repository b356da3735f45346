#include "trace_checks.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "helpers.hpp"

namespace tbtest {

namespace {

struct span {
  std::string name, cat;
  double ts = 0, end = 0;
  long long batch = -1;
};

constexpr double eps = 1e-3;  // the file's resolution: 1 ns in microseconds

// The order in which the runner runs a batch's stages.
int stage_order(const std::string& name) {
  static const char* order[] = {"data_wait", "h2d", "preprocess", "forward", "backward", "allreduce", "optimizer"};
  for (int i = 0; i < 7; ++i)
    if (name == order[i]) return i;
  return -1;
}

// Within each batch on one lane, the stages start in the runner's order.
void check_order(const std::string& lane, const std::vector<span>& sorted, trace_facts& f) {
  std::map<long long, const span*> last;
  for (const span& s : sorted) {
    if ((s.cat != "stage" && s.cat != "launch") || stage_order(s.name) < 0) continue;
    const span*& before = last[s.batch];
    if (before && stage_order(before->name) > stage_order(s.name))
      f.errors.push_back(lane + ": " + s.name + " of batch " + std::to_string(s.batch) + " starts after " +
                         before->name);
    before = &s;
  }
}

void check_lane(const std::string& lane, std::vector<span> spans, trace_facts& f) {
  std::sort(spans.begin(), spans.end(),
            [](const span& a, const span& b) { return a.ts != b.ts ? a.ts < b.ts : a.end > b.end; });
  std::vector<const span*> open;
  std::map<long long, const span*> batch_of, fill_of;
  for (const span& s : spans) {
    while (!open.empty() && open.back()->end <= s.ts + eps) open.pop_back();
    if (!open.empty() && s.end > open.back()->end + eps)
      f.errors.push_back(lane + ": " + s.name + " of batch " + std::to_string(s.batch) + " partly overlaps " +
                         open.back()->name + " of batch " + std::to_string(open.back()->batch));
    open.push_back(&s);
    if (s.name == "batch") batch_of[s.batch] = &s;
    if (s.name == "fill") fill_of[s.batch] = &s;
  }
  check_order(lane, spans, f);
  for (const span& s : spans) {
    // The copy stream's lane holds copies only: their batch spans are on the compute stream.
    const bool stage = (s.cat == "stage" || s.cat == "launch") && s.name != "batch" && !batch_of.empty();
    const bool phase = s.cat == "load" && s.name != "fill" && s.name != "slot_wait";
    if (!stage && !phase) continue;
    const auto& parents = stage ? batch_of : fill_of;
    const auto it = parents.find(s.batch);
    if (it == parents.end()) {
      f.errors.push_back(lane + ": " + s.name + " of batch " + std::to_string(s.batch) + " has no " +
                         (stage ? "batch" : "fill") + " span on its lane");
    } else if (s.ts < it->second->ts - eps || s.end > it->second->end + eps) {
      f.errors.push_back(lane + ": " + s.name + " of batch " + std::to_string(s.batch) + " is outside its " +
                         (stage ? "batch" : "fill"));
    }
  }
}

}  // namespace

trace_facts check_trace(const nlohmann::json& trace) {
  trace_facts f;
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    f.errors.push_back("no traceEvents array");
    return f;
  }
  std::map<std::pair<int, int>, std::string> names;
  std::map<std::pair<int, int>, std::vector<span>> lanes;
  std::set<long long> flow_starts, flow_ends;
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e.at("ph").get<std::string>();
    const std::pair<int, int> key{e.at("pid").get<int>(), e.at("tid").get<int>()};
    pids.insert(key.first);
    if (ph == "M" && e.at("name") == "thread_name") {
      names[key] = e.at("args").at("name").get<std::string>();
      f.lanes.push_back(names[key]);
      if (names[key].rfind("loader worker ", 0) == 0) ++f.worker_lanes;
    } else if (ph == "X") {
      span s;
      s.name = e.at("name").get<std::string>();
      s.cat = e.value("cat", "");
      s.ts = e.at("ts").get<double>();
      const double dur = e.at("dur").get<double>();
      if (dur < 0) f.errors.push_back(s.name + ": negative duration");
      s.end = s.ts + dur;
      if (e.contains("args") && e["args"].contains("batch")) s.batch = e["args"]["batch"].get<long long>();
      if (s.cat == "window") continue;  // holds batches, belongs to none
      if (s.cat == "load") ++f.load_spans[s.name];
      lanes[key].push_back(s);
    } else if (ph == "C") {
      for (const auto& item : e.at("args").items()) ++f.counters[e.at("name").get<std::string>() + " " + item.key()];
    } else if (ph == "s") {
      flow_starts.insert(e.at("id").get<long long>());
    } else if (ph == "f") {
      flow_ends.insert(e.at("id").get<long long>());
    }
  }
  for (auto& [key, spans] : lanes) {
    const std::string lane = names.count(key) ? names[key] : "tid " + std::to_string(key.second);
    for (const span& s : spans) {
      if (s.cat != "stage") continue;
      f.stage_s[s.name] += (s.end - s.ts) / 1e6;
      ++f.stage_n[s.name];
      f.lane_stage_s[lane][s.name] += (s.end - s.ts) / 1e6;
    }
    check_lane(lane, spans, f);
  }
  for (long long id : flow_starts) f.flows += static_cast<int>(flow_ends.count(id));
  f.pids.assign(pids.begin(), pids.end());
  return f;
}

int svg_groups(const std::filesystem::path& svg, const std::string& cls) {
  const char* env = std::getenv("TRAINBENCH_PYTHON");
  const std::string python = env ? env : TRAINBENCH_TEST_PYTHON;
  const auto r = run_shell("'" + python +
                           "' -c 'import sys, xml.etree.ElementTree as ET; root = ET.parse(sys.argv[1]).getroot(); "
                           "print(\"groups=%d\" % sum(1 for g in root.iter(\"{http://www.w3.org/2000/svg}g\") "
                           "if g.get(\"class\") == sys.argv[2]))' '" +
                           svg.string() + "' '" + cls + "'");
  const auto at = r.output.find("groups=");
  if (r.code != 0 || at == std::string::npos) return -1;
  return std::stoi(r.output.substr(at + 7));
}

}  // namespace tbtest
