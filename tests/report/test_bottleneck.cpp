// The input-bound verdict on constructed windows: what a user reads off `trainbench bottleneck`.
#include <catch2/catch.hpp>

#include "trainbench/report/bottleneck.hpp"

using namespace trainbench;

namespace {

std::vector<double> scaled(const std::vector<double>& v, double factor) {
  std::vector<double> out;
  for (double x : v) out.push_back(x * factor);
  return out;
}

const std::vector<double> steady{100.0, 101.0, 99.0, 100.5, 99.5, 100.2};

bool mentions(const std::vector<std::string>& hints, const std::string& key) {
  for (const auto& h : hints)
    if (h.find(key) != std::string::npos) return true;
  return false;
}

bottleneck_input windows(const std::vector<double>& loop, const std::vector<double>& ceiling) {
  bottleneck_input in;
  in.loop = loop;
  in.ceiling = ceiling;
  in.rounds = 3;
  in.batch_s = 0.1;
  return in;
}

}  // namespace

TEST_CASE("a loop clearly below its ceiling is input-bound, and the loader's switches are suggested") {
  bottleneck_input in = windows(scaled(steady, 0.8), steady);
  in.data_wait_s = 0.02;  // the step waited on the loader for the whole gap
  profile p;
  p.data.workers = 0;
  const auto f = judge_bottleneck(in, p, 3.0, 0.05);
  CHECK(f.result == bound::input);
  CHECK(f.share_of_ceiling == Approx(0.8));
  CHECK(f.row.change_pct == Approx(-20.0));
  CHECK(f.explanation.find("input costs 20.0%") != std::string::npos);
  CHECK(mentions(f.hints, "data.workers: 0"));
  CHECK_FALSE(mentions(f.hints, "explain less than half"));
  CHECK_FALSE(mentions(f.hints, "copy_stream"));  // the wait was the loader, not the copy

  // The JSON a CI job reads.
  const auto j = bottleneck_json(f, in, "p");
  CHECK(j["verdict"] == "INPUT-BOUND");
  CHECK(j["loop_samples_per_s"]["windows"].size() == 6);
  CHECK(j["share_of_ceiling"].get<double>() == Approx(0.8));
}

TEST_CASE("a copy-bound GPU loop gets the transfer switches it has not turned on") {
  bottleneck_input in = windows(scaled(steady, 0.7), steady);
  in.cuda = true;
  in.h2d_s = 0.02;
  in.data_wait_s = 0.001;
  profile p;
  p.data.workers = 4;
  const auto f = judge_bottleneck(in, p, 3.0, 0.05);
  REQUIRE(f.result == bound::input);
  CHECK(mentions(f.hints, "data.pin_memory"));
  CHECK(mentions(f.hints, "transfer.copy_stream"));
  CHECK_FALSE(mentions(f.hints, "data.workers"));

  p.data.pin_memory = true;
  p.transfer.copy_stream = true;
  const auto g = judge_bottleneck(in, p, 3.0, 0.05);
  CHECK_FALSE(mentions(g.hints, "data.pin_memory"));
  CHECK_FALSE(mentions(g.hints, "transfer.copy_stream"));
  CHECK(mentions(g.hints, "data.preprocess: device"));
}

TEST_CASE("a gap the step's waits do not explain says the input work slows the step itself") {
  bottleneck_input in = windows(scaled(steady, 0.6), steady);
  in.data_wait_s = 0.001;  // gap: 0.1 s * 0.4 = 40 ms per batch; waits: 1 ms
  profile p;
  const auto f = judge_bottleneck(in, p, 3.0, 0.05);
  REQUIRE(f.result == bound::input);
  CHECK(mentions(f.hints, "explain less than half"));
  CHECK(mentions(f.hints, "share the CPU cores"));
}

TEST_CASE("a loop at its ceiling is compute-bound, with nothing to suggest about input, and no CUDA graph on a CPU") {
  const std::vector<double> same{100.3, 99.8, 100.1, 99.6, 100.4, 100.0};
  const auto f = judge_bottleneck(windows(same, steady), profile{}, 3.0, 0.05);
  CHECK(f.result == bound::compute);
  CHECK(f.hints.empty());
  CHECK(f.explanation.find("faster loading would not help") != std::string::npos);
  CHECK(f.explanation.find("cuda_graph") == std::string::npos);  // a CPU run has no CUDA graph to try

  bottleneck_input gpu = windows(same, steady);
  gpu.cuda = true;
  CHECK(judge_bottleneck(gpu, profile{}, 3.0, 0.05).explanation.find("cuda_graph") != std::string::npos);
}

TEST_CASE("noisy or too few windows give no verdict, and a loop above its ceiling is flagged") {
  const std::vector<double> noisy{80, 120, 95, 110, 70, 105};
  CHECK(judge_bottleneck(windows(noisy, steady), profile{}, 3.0, 0.05).result == bound::ambiguous);
  const auto few = judge_bottleneck(windows({80, 81, 79}, {100, 101, 99}), profile{}, 3.0, 0.05);
  CHECK(few.result == bound::ambiguous);
  CHECK(few.explanation.find("too few windows") != std::string::npos);
  CHECK(few.row.to_decide == std::size_t{4});
  CHECK(judge_bottleneck(windows(scaled(steady, 1.2), steady), profile{}, 3.0, 0.05).result == bound::unexpected);
}

TEST_CASE("COMPUTE-BOUND only when the gap's interval lies within the threshold") {
  // A loop 2.6% below its ceiling with a 95% interval of [-7.0%, +0.2%]: a 7% input cost is
  // well within what these windows allow, so the verdict is AMBIGUOUS, never COMPUTE-BOUND.
  const auto f = judge_bottleneck(windows({968.5, 987.6, 976.9, 994.7, 949.3}, {1021.3, 986.0, 993.2, 1046.9, 990.1}),
                                  profile{}, 3.0, 0.05);
  CHECK(f.result == bound::ambiguous);
  CHECK(f.explanation.find("[-7.0%, +0.2%] reaches beyond ±3%") != std::string::npos);
  CHECK(f.row.to_decide);
}
