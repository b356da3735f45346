// --trace end to end on the CPU: the trace's structure, its agreement with the report, the
// loader's lanes, and the timeline chart drawn from it.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>

#include "helpers.hpp"
#include "trace_checks.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int measured = 4, windows = 2;
const std::string counts =
    " --set measure.warmup_batches=2 --set measure.measured_batches=" + std::to_string(measured) +
    " --set measure.repeats=" + std::to_string(windows);

// The report's total per stage (mean per batch times the batches that ran it) against the trace's.
void check_totals(const nlohmann::json& report, const tbtest::trace_facts& f) {
  const auto& stages = report.at("results").at("stages_s");
  REQUIRE(!stages.empty());
  // bench-data lengthens its windows to measure.min_window_s: the report says how many batches.
  const int batches = report.at("results").at("window_batches").get<int>() * windows;
  for (const auto& [name, summary] : stages.items()) {
    INFO(name);
    REQUIRE(f.stage_n.count(name));
    CHECK(f.stage_n.at(name) == batches);
    const double report_total = summary.at("mean").get<double>() * batches;
    CHECK(f.stage_s.at(name) == Approx(report_total).epsilon(0.01));
  }
  for (const auto& [name, n] : f.stage_n) CHECK(stages.contains(name));
}

std::string errors_of(const tbtest::trace_facts& f) {
  std::string out;
  for (const auto& e : f.errors) out += e + "\n";
  return out;
}

}  // namespace

TEST_CASE("run --trace: every measured batch's stages as the report measured them, a lane per worker") {
  const auto dir = tbtest::scratch("e2e-trace-run");
  const fs::path trace = dir / "out" / "trace.json";
  const auto r = tbtest::run_cli("run --config '" + tbtest::tiny_profile(dir) + "' --set data.workers=2" + counts +
                                 " --trace '" + trace.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  REQUIRE(fs::exists(trace));
  const auto json = tbtest::read_json(trace);  // parses as JSON
  const auto f = tbtest::check_trace(json);
  INFO(errors_of(f));
  CHECK(f.errors.empty());
  check_totals(tbtest::read_json(dir / "tiny.json"), f);
  CHECK(f.worker_lanes == 2);
  CHECK(f.lanes.front() == "training thread");
  // Every measured batch's fill, and the arrow from it to the batch that trained on it.
  CHECK(f.load_spans.at("fill") >= measured * windows);
  CHECK(f.flows == measured * windows);
  CHECK(f.counters.count("loader ring ready batches"));
  CHECK(json.at("otherData").at("lost_events") == 0);
  CHECK(json.at("otherData").at("windows") == windows);
  for (const auto& entry : fs::directory_iterator(dir / "out")) CHECK(entry.path() == trace);  // no temp file left

  SECTION("timeline draws a few batches: one group per lane, valid XML") {
    // The trace holds the measured batches, numbered on from warmup's (which also took the
    // batches the loader's ring held).
    const int first = tbtest::read_json(dir / "tiny.json").at("results").at("warmup_batches_done").get<int>();
    const int last = first + measured * windows - 1;
    const auto batches = [](int a, int b) { return " --batches " + std::to_string(a) + ":" + std::to_string(b); };
    const fs::path svg = dir / "timeline.svg";
    const auto t =
        tbtest::run_cli("timeline '" + trace.string() + "' --out '" + svg.string() + "'" + batches(first + 1, first + 3));
    INFO(t.output);
    REQUIRE(t.code == 0);
    CHECK(tbtest::svg_groups(svg, "lane") == 3);  // the training thread and two workers
    CHECK(tbtest::svg_groups(svg, "counter") == 1);
    // Batches the trace does not hold: exit 2, naming the ones it does.
    const auto bad =
        tbtest::run_cli("timeline '" + trace.string() + "' --out '" + svg.string() + "'" + batches(0, first - 1));
    CHECK(bad.code == 2);
    CHECK(bad.output.find("holds batches " + std::to_string(first) + " to " + std::to_string(last)) !=
          std::string::npos);
    CHECK(tbtest::run_cli("timeline '" + trace.string() + "'" + batches(first + 3, first + 3)).code == 2);
  }
}

TEST_CASE("bench-data --trace on an image folder: fills with read, decode, crop_resize inside") {
  const auto dir = tbtest::scratch("e2e-trace-folder");
  const auto made = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() +
                                    "' --classes 2 --per-class 6 --seed 3");
  REQUIRE(made.code == 0);
  tbtest::write_text(dir / "folder.yaml",
                     "name: folder\ndevice: cpu\nseed: 1\nthreads: 1\nmodel: {num_classes: 2}\n"
                     "data: {source: imagefolder, path: '" +
                         (dir / "ds").string() +
                         "', image_size: 32, workers: 1}\ntrain: {batch_size: 4}\n"
                         "measure: {nvtx: off}\nreport: {path: '" +
                         (dir / "folder.json").string() + "'}\n");
  for (int workers : {0, 1}) {
    INFO("workers " << workers);
    const fs::path trace = dir / ("trace-" + std::to_string(workers) + ".json");
    const auto r = tbtest::run_cli("bench-data --config '" + (dir / "folder.yaml").string() + "' --set data.workers=" +
                                   std::to_string(workers) + counts + " --trace '" + trace.string() + "'");
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto f = tbtest::check_trace(tbtest::read_json(trace));
    INFO(errors_of(f));
    CHECK(f.errors.empty());  // phases within their fill, stages within their batch
    check_totals(tbtest::read_json(dir / "folder.bench-data.json"), f);
    CHECK(f.worker_lanes == workers);
    for (const char* phase : {"read", "decode", "crop_resize"})
      CHECK((f.load_spans.count(phase) ? f.load_spans.at(phase) : 0) >=
            4 * measured * windows);        // one per image of each measured batch
    if (workers == 0) CHECK(f.flows == 0);  // the training thread filled its own batches
  }
}

// A failure is when a user most needs the timeline: the trace keeps every batch up to it.
TEST_CASE("a run that fails inside its first window keeps the batches before the failure in the trace") {
  const auto dir = tbtest::scratch("e2e-trace-failed");
  const auto made = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() +
                                    "' --classes 2 --per-class 6 --seed 3");
  REQUIRE(made.code == 0);
  // Unshuffled, the files come in name order, 4 to a batch: the tenth is in batch 2.
  const fs::path bad = dir / "ds/train/class_0001/class_0001_000003.JPEG";
  REQUIRE(fs::exists(bad));
  fs::resize_file(bad, fs::file_size(bad) / 3);
  tbtest::write_text(dir / "folder.yaml",
                     "name: folder\ndevice: cpu\nseed: 1\nthreads: 1\nmodel: {num_classes: 2}\n"
                     "data: {source: imagefolder, path: '" +
                         (dir / "ds").string() +
                         "', image_size: 32, workers: 0, shuffle: false}\ntrain: {batch_size: 4}\n"
                         "measure: {warmup_batches: 0, measured_batches: 3, repeats: 2, nvtx: off}\n"
                         "report: {path: '" +
                         (dir / "folder.json").string() + "'}\n");
  const fs::path trace = dir / "trace.json";
  const auto r =
      tbtest::run_cli("run --config '" + (dir / "folder.yaml").string() + "' --trace '" + trace.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 2);  // bad input found mid-run
  REQUIRE(r.output.find(bad.string()) != std::string::npos);
  const auto json = tbtest::read_json(trace);
  const auto f = tbtest::check_trace(json);
  INFO(errors_of(f));
  CHECK(f.errors.empty());
  const auto& other = json.at("otherData");
  CHECK(other.at("status") == "error");
  CHECK(other.at("windows") == 0);  // as the report: no window finished
  CHECK(other.at("incomplete_windows") == 1);
  CHECK(tbtest::read_json(dir / "folder.json").at("results").at("repeats").empty());
  // The window, marked as cut short, and its two finished batches with their stages.
  int windows = 0;
  std::set<long long> batches;
  for (const auto& e : json.at("traceEvents")) {
    if (e.value("cat", "") == "window") {
      ++windows;
      CHECK(e.at("name") == "measured window (incomplete)");
      CHECK(e.at("args").at("batches_done") == 2);
      CHECK(e.at("args").at("batches") == 3);
    }
    if (e.value("name", "") == "batch" && e.value("cat", "") == "stage")
      batches.insert(e.at("args").at("batch").get<long long>());
  }
  CHECK(windows == 1);
  CHECK(batches == std::set<long long>{0, 1});
  CHECK(f.stage_n.at("forward") == 2);
  CHECK(f.stage_n.at("optimizer") == 2);
}

TEST_CASE("run with --trace to a path that cannot be written: exit 2 naming the option and path, nothing run") {
  const auto dir = tbtest::scratch("e2e-trace-bad");
  tbtest::write_text(dir / "file", "x");
  const fs::path trace = dir / "file" / "trace.json";
  const auto r = tbtest::run_cli("run --config '" + tbtest::tiny_profile(dir) + "' --trace '" + trace.string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--trace '" + trace.string() + "'") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "tiny.json"));
}

TEST_CASE("timeline on a file that is not a trace: exit 2 naming it") {
  const auto dir = tbtest::scratch("e2e-timeline-bad");
  tbtest::write_text(dir / "r.json", "{\"results\": {}}");
  const auto r =
      tbtest::run_cli("timeline '" + (dir / "r.json").string() + "' --out '" + (dir / "t.svg").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("r.json") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "t.svg"));
}
