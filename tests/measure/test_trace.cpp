// The trace recorder on its own: what a window writes, bounded rings, no half-written file; and the
// timeline chart drawn from what it wrote.
#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"
#include "trace_checks.hpp"
#include "trainbench/measure/trace.hpp"
#include "trainbench/timeline/timeline.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

trace_options options(const fs::path& file) {
  trace_options o;
  o.path = file.string();
  o.label = "unit";
  o.workers = 1;
  o.ring_slots = 2;
  o.measured_batches = 2;
  return o;
}

// Two batches of a window at `t` (ns): each a batch span holding data_wait and forward.
window_times two_batches(std::int64_t t) {
  window_times w;
  for (int row = 0; row < 2; ++row) {
    const std::int64_t b = t + row * 1000;
    w.spans.push_back({stage_id::batch, row, span_lane::host, true, b, b + 900});
    w.spans.push_back({stage_id::data_wait, row, span_lane::host, true, b + 10, b + 100});
    w.spans.push_back({stage_id::forward, row, span_lane::host, true, b + 100, b + 800});
  }
  return w;
}

// The first test's trace: batch 0 filled before the window, batch 1 inside it.
void record_two_batches(const fs::path& file) {
  trace_recorder rec(options(file));
  const std::int64_t t = steady_now_ns();
  rec.batch_filled(0, 0, 0, t - 500, t - 400);
  rec.batch_ready(0, 0, 1, t - 400);
  rec.window_begin(0, 2);
  rec.batch_taken(0, 0, t + 50);
  rec.batch_filled(0, 1, 1, t + 100, t + 600);
  rec.batch_taken(1, 0, t + 1050);
  rec.window_end(two_batches(t));
  rec.close();
}

std::size_t occurrences(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("trace recorder: a window's spans, the worker's fills and the arrows between them") {
  const auto dir = tbtest::scratch("trace-unit");
  const fs::path file = dir / "t.json";
  {
    trace_recorder rec(options(file));
    const std::int64_t t = steady_now_ns();
    rec.batch_filled(0, 0, 0, t - 500, t - 400);  // prefetched before the window: still shown
    rec.batch_ready(0, 0, 1, t - 400);
    rec.batch_filled(0, 9, 1, t - 300, t - 200);  // a batch no window trains: dropped
    rec.window_begin(0, 2);
    rec.batch_taken(0, 0, t + 50);
    rec.batch_filled(0, 1, 1, t + 100, t + 600);
    rec.batch_taken(1, 0, t + 1050);
    rec.window_end(two_batches(t));
    rec.close();
    CHECK(rec.lost_events() == 0);
  }
  const auto json = tbtest::read_json(file);
  const auto f = tbtest::check_trace(json);
  for (const auto& e : f.errors) FAIL_CHECK(e);
  CHECK(f.worker_lanes == 1);
  CHECK(f.load_spans.at("fill") == 2);
  CHECK(f.flows == 2);
  CHECK(f.stage_n.at("forward") == 2);
  CHECK(f.stage_s.at("forward") == Approx(2 * 700e-9));
  CHECK(f.counters.at("loader ring ready batches") == 3);
  CHECK(json.at("otherData").at("windows") == 1);
}

TEST_CASE("trace recorder: windows longer than measured_batches (measure.min_window_s) keep every batch") {
  const auto dir = tbtest::scratch("trace-unit-long");
  const fs::path file = dir / "t.json";
  {
    trace_recorder rec(options(file));  // planned for windows of 2
    const std::int64_t t = steady_now_ns();
    rec.window_begin(0, 4);
    window_times w;
    for (int row = 0; row < 4; ++row) {
      const std::int64_t b = t + row * 1000;
      rec.batch_filled(0, row, row % 2, b - 900, b - 800);
      w.spans.push_back({stage_id::batch, row, span_lane::host, true, b, b + 900});
      w.spans.push_back({stage_id::forward, row, span_lane::host, true, b + 100, b + 800});
    }
    rec.window_end(w);
    rec.close();
  }
  const auto json = tbtest::read_json(file);
  const auto f = tbtest::check_trace(json);
  for (const auto& e : f.errors) FAIL_CHECK(e);
  CHECK(f.stage_n.at("forward") == 4);
  CHECK(f.load_spans.at("fill") == 4);
  CHECK(f.flows == 4);
  CHECK(json.at("otherData").at("measured_batches") == 4);
}

TEST_CASE("trace recorder: a full ring loses the oldest events and says how many, and the file stays valid") {
  const auto dir = tbtest::scratch("trace-unit-full");
  const fs::path file = dir / "t.json";
  const trace_options o = options(file);
  const std::size_t capacity = trace_capacity(o);
  {
    trace_recorder rec(o);
    const std::int64_t t = steady_now_ns();
    rec.window_begin(0, 2);
    for (std::size_t i = 0; i < capacity + 10; ++i) rec.phase(0, 0, load_phase::read, t, t + 1);
    rec.window_end(two_batches(t));
    rec.close();
    CHECK(rec.lost_events() == 10);
  }
  const auto json = tbtest::read_json(file);
  CHECK(json.at("otherData").at("lost_events") == 10);
}

TEST_CASE("trace recorder: a batch still being filled when the run ends leaves no phase without its fill") {
  const auto dir = tbtest::scratch("trace-unit-unfilled");
  const fs::path file = dir / "t.json";
  {
    trace_recorder rec(options(file));
    rec.window_begin(0, 2);
    const std::int64_t t = steady_now_ns();
    rec.phase(0, 2, load_phase::read, t, t + 1);  // batch 2's first image; its fill is not done
    rec.window_end(two_batches(t));
    rec.close();
  }
  const auto f = tbtest::check_trace(tbtest::read_json(file));
  for (const auto& e : f.errors) FAIL_CHECK(e);
  CHECK(f.load_spans.count("read") == 0);
}

TEST_CASE("trace recorder: without close() the partial file is removed, and an unwritable path is a config error") {
  const auto dir = tbtest::scratch("trace-unit-abort");
  {
    trace_recorder rec(options(dir / "t.json"));
    rec.window_begin(0, 2);
  }
  CHECK(fs::is_empty(dir));
  tbtest::write_text(dir / "plain", "x");
  CHECK_THROWS_AS(trace_recorder(options(dir / "plain" / "t.json")), config_error);
}

TEST_CASE("timeline: the batches asked for with their stages, the arrows inside the range, a time axis in ms") {
  const auto dir = tbtest::scratch("timeline-unit");
  const fs::path file = dir / "t.json";
  record_two_batches(file);
  const trace_model m = read_trace(read_text_file(file.string()), file.string());
  REQUIRE(m.lanes.size() == 2);
  CHECK(m.lanes[0].name == "training thread");
  CHECK(m.lanes[1].name == "loader worker 0");
  CHECK(traced_batches(m) == std::vector<std::int64_t>{0, 1});
  CHECK(m.flows.size() == 2);

  const std::string one = timeline_svg(m, parse_batch_range("1:2"));
  CHECK(one.find("forward, batch 1") != std::string::npos);
  CHECK(one.find("forward, batch 0") == std::string::npos);
  CHECK(one.find(">ms</text>") != std::string::npos);
  // Batch 0's fill ran before the range: only batch 1's arrow has both ends inside it.
  CHECK(occurrences(timeline_svg(m, parse_batch_range("0:2")), "marker-end=") == 1);
  CHECK(occurrences(one, "class=\"lane\"") == 2);

  CHECK_THROWS_AS(timeline_svg(m, parse_batch_range("5:7")), input_error);
  for (const char* bad : {"3", "5:3", "a:b", "-1:2", "2:2"}) CHECK_THROWS_AS(parse_batch_range(bad), input_error);
  CHECK_THROWS_AS(read_trace("[1, 2", "x.json"), input_error);
}
