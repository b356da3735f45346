// The live progress line and the window-length rule, on a clock the test turns by hand.
#include <catch2/catch.hpp>

#include "trainbench/measure/progress.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/measure/stats.hpp"

using namespace trainbench;

TEST_CASE("on a terminal the line is redrawn in place, at most four times a second") {
  double now = 100.0;
  progress_line line(true, [&] { return now; });
  CHECK(line.update("measure", 1, 10, 0.0).rfind("\rmeasure: batch 1/10", 0) == 0);  // at once
  now += 0.1;
  CHECK(line.update("measure", 2, 10, 0.0).empty());  // too soon
  now += 0.3;
  const std::string text = line.update("measure", 4, 10, 512.25);
  CHECK(text.rfind("\rmeasure: batch 4/10, 512.2 samples/s (last window), about 1 s left", 0) == 0);
  now += 0.01;
  CHECK(line.update("measure", 10, 10, 512.25).back() == '\n');  // the phase's end always shows
}

TEST_CASE("elsewhere a plain line every 5 seconds with the time left, and one per phase") {
  double now = 0.0;
  progress_line line(false, [&] { return now; });
  CHECK(line.update("measure", 1, 100, 0.0).empty());
  now = 4.0;
  CHECK(line.update("measure", 20, 100, 0.0).empty());
  now = 5.0;
  // 25 batches in 5 s: 75 more take 15 s.
  CHECK(line.update("measure", 25, 100, 40.0) ==
        "measure: batch 25/100, 40.0 samples/s (last window), about 15 s left");
  CHECK(line.update("measure", 100, 100, 40.0) == "measure: 100 batches done");
  CHECK(line.update("warmup", 1, 1, 0.0) == "warmup: 1 batches done");
}

TEST_CASE("measure.min_window_s: a short window asks for more batches, 20% past the minimum, at most 10x") {
  CHECK(window_batches_wanted(3, 0.5, 0.5) == 3);   // long enough
  CHECK(window_batches_wanted(3, 0.25, 0.5) == 8);  // ceil(1.2 * 3 * 2)
  CHECK(window_batches_wanted(3, 1e-6, 0.5) == 30);
  CHECK(window_batches_wanted(3, 0.0, 0.5) == 30);
}

TEST_CASE("noise levels at cv 10% and 25%") {
  CHECK(std::string(noise_level(summarize({99, 100, 101}))) == "ok");
  CHECK(std::string(noise_level(summarize({85, 100, 115}))) == "noisy");
  CHECK(std::string(noise_level(summarize({296, 7, 66}))) == "very_noisy");
  CHECK(std::string(noise_level(summarize({5}))) == "ok");  // no spread to judge
}
