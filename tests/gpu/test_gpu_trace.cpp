// --trace on a GPU: device lanes from the clock's CUDA events, placed on the host clock.
#include <torch/cuda.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>

#include "gpu/gpu_profiles.hpp"
#include "helpers.hpp"
#include "trace_checks.hpp"

namespace fs = std::filesystem;

namespace {

struct gspan {
  double ts, end;
  long long batch;
};

// Spans of one lane by name, read from the file.
std::map<std::string, std::vector<gspan>> lane_spans(const nlohmann::json& trace, const std::string& lane,
                                                     const std::string& cat) {
  int tid = -1;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == lane) tid = e["tid"].get<int>();
  std::map<std::string, std::vector<gspan>> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != tid || e.value("cat", "") != cat) continue;
    const double ts = e["ts"].get<double>();
    out[e["name"].get<std::string>()].push_back({ts, ts + e["dur"].get<double>(), e["args"]["batch"].get<long long>()});
  }
  return out;
}

double intersection(double a0, double a1, double b0, double b1) {
  return std::max(0.0, std::min(a1, b1) - std::max(a0, b0));
}

}  // namespace

TEST_CASE("trace on CUDA: compute and copy stream lanes, the report's stage totals, copies placed against the step",
          "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto dir = tbtest::scratch("gpu-trace");
  const int measured = 8, windows = 3;
  const fs::path trace = dir / "trace.json";
  tbtest::write_text(dir / "p.yaml", tbgpu::trace_profile((dir / "r.json").string()));
  const auto r = tbtest::run_cli("run --config '" + (dir / "p.yaml").string() + "' --trace '" + trace.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto json = tbtest::read_json(trace);
  const auto report = tbtest::read_json(dir / "r.json");
  const auto f = tbtest::check_trace(json);
  for (const auto& e : f.errors) FAIL_CHECK(e);
  CHECK(std::count(f.lanes.begin(), f.lanes.end(), "GPU compute stream") == 1);
  CHECK(std::count(f.lanes.begin(), f.lanes.end(), "GPU copy stream") == 1);
  CHECK(f.worker_lanes == 2);

  // The measured spans are the clock's: per stage, the report's totals within 1%.
  for (const auto& [name, summary] : report["results"]["stages_s"].items()) {
    INFO(name);
    REQUIRE(f.stage_n.count(name));
    CHECK(f.stage_n.at(name) == measured * windows);
    CHECK(f.stage_s.at(name) == Approx(summary["mean"].get<double>() * measured * windows).epsilon(0.01));
  }
  const auto& copy_lane = f.lane_stage_s.at("GPU copy stream");
  CHECK(copy_lane.count("h2d"));

  // Placed on the host clock: the device never starts a batch before the host enqueued it (to
  // within the calibration's bracket and the events' 0.5 us resolution).
  double calibration_us = 0;
  struct window_span {
    long long first, batches;
    double end;
  };
  std::vector<window_span> window_ends;
  for (const auto& e : json["traceEvents"])
    if (e["ph"] == "X" && e.value("cat", "") == "window") {
      calibration_us = std::max(calibration_us, e["args"]["calibration_us"].get<double>());
      window_ends.push_back({e["args"]["first_batch"].get<long long>(), e["args"]["batches"].get<long long>(),
                             e["ts"].get<double>() + e["dur"].get<double>()});
    }
  REQUIRE(window_ends.size() == static_cast<std::size_t>(windows));
  const auto host = lane_spans(json, "training thread", "launch");
  const auto device = lane_spans(json, "GPU compute stream", "stage");
  std::map<long long, double> enqueued;
  for (const auto& s : host.at("batch")) enqueued[s.batch] = s.ts;
  for (const auto& s : device.at("batch")) {
    INFO("batch " << s.batch);
    CHECK(s.ts >= enqueued.at(s.batch) - calibration_us - 1.0);
    // ... and ends inside its window's span on the host clock (a coarse check: the span ends
    // after finish_window returned; tests/measure/test_clock_fit.cpp checks the mapping itself).
    const auto w = std::find_if(window_ends.begin(), window_ends.end(),
                                [&](const auto& e) { return s.batch >= e.first && s.batch < e.first + e.batches; });
    REQUIRE(w != window_ends.end());
    CHECK(s.end <= w->end + calibration_us + 1.0);
  }

  // The copy stream's overlap with the step, measured on the trace's lanes, is the report's.
  const auto copies = lane_spans(json, "GPU copy stream", "stage").at("h2d");
  std::map<long long, std::pair<double, double>> step;  // batch -> forward begin .. last stage end
  for (const char* stage : {"forward", "backward", "optimizer"}) {
    if (!device.count(stage)) continue;
    for (const auto& s : device.at(stage)) {
      auto& k = step.emplace(s.batch, std::make_pair(s.ts, s.end)).first->second;
      k.first = std::min(k.first, s.ts);
      k.second = std::max(k.second, s.end);
    }
  }
  std::vector<double> shares;
  const long long first = device.at("batch").front().batch;
  for (int w = 0; w < windows; ++w) {
    double total = 0, hidden = 0;
    for (const auto& c : copies) {
      if (c.batch < first + w * measured || c.batch >= first + (w + 1) * measured) continue;
      total += c.end - c.ts;
      for (const auto& [b, k] : step)
        if (b >= first + w * measured && b < first + (w + 1) * measured)
          hidden += intersection(c.ts, c.end, k.first, k.second);
    }
    if (total > 0) shares.push_back(std::min(1.0, hidden / total));
  }
  REQUIRE(shares.size() == windows);
  std::sort(shares.begin(), shares.end());
  CHECK(shares[windows / 2] == Approx(report["results"]["h2d_overlap_share"].get<double>()).margin(0.02));
}
