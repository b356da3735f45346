// The trace recorder on its own: what a window writes, bounded rings, no half-written file.
#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"
#include "trace_checks.hpp"
#include "trainbench/measure/trace.hpp"
#include "trainbench/util/error.hpp"

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
    rec.window_begin(0);
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

TEST_CASE("trace recorder: a full ring loses the oldest events and says how many, and the file stays valid") {
  const auto dir = tbtest::scratch("trace-unit-full");
  const fs::path file = dir / "t.json";
  const trace_options o = options(file);
  const std::size_t capacity = trace_capacity(o);
  {
    trace_recorder rec(o);
    const std::int64_t t = steady_now_ns();
    rec.window_begin(0);
    for (std::size_t i = 0; i < capacity + 10; ++i) rec.phase(0, 0, load_phase::read, t, t + 1);
    rec.window_end(two_batches(t));
    rec.close();
    CHECK(rec.lost_events() == 10);
  }
  const auto json = tbtest::read_json(file);
  CHECK(json.at("otherData").at("lost_events") == 10);
}

TEST_CASE("trace recorder: without close() the partial file is removed, and an unwritable path is a config error") {
  const auto dir = tbtest::scratch("trace-unit-abort");
  {
    trace_recorder rec(options(dir / "t.json"));
    rec.window_begin(0);
  }
  CHECK(fs::is_empty(dir));
  tbtest::write_text(dir / "plain", "x");
  CHECK_THROWS_AS(trace_recorder(options(dir / "plain" / "t.json")), config_error);
}
