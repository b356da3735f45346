// A ladder's rounds pooled into one result, and the profile differences its table and the
// baseline check name.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "trainbench/config/profile_diff.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/report/pooling.hpp"

using namespace trainbench;

namespace {

run_result round_of(double rate, double stage_s, std::int64_t rss, std::int64_t skipped) {
  run_result r;
  r.windows = {{8, 8 / rate, rate}, {8, 8 / (rate + 1), rate + 1}};
  r.stages_s["forward"] = {stage_s, stage_s * 2};
  r.loss_first = rate;
  r.loss_last = rate / 2;
  r.skipped_steps = skipped;
  r.skipped_by_cause = std::array<std::int64_t, 3>{0, skipped > 1 ? 1 : 0, skipped > 1 ? skipped - 1 : skipped};
  r.input_abs_max = rate / 100;
  r.loss_scale = 1024.0 * static_cast<double>(skipped + 1);
  r.warmup_batches_done = 3;
  r.window_batches = 2;
  r.memory.host_peak_rss_bytes = rss;
  r.stopped_by = "repeats";
  r.processes = {{rate / 100, 0.5, rate / 1000, 1.7e9 + rate, 1.7e9 + rate + 2}};
  return r;
}

}  // namespace

TEST_CASE("a round's result survives the state file exactly") {
  run_result r = round_of(100.0 / 3.0, 0.1 / 7.0, 123456789, 2);
  r.dist.emplace();
  r.dist->backend = "gloo";
  r.dist->world = 2;
  r.dist->ranks = {{0, r.windows, 0.001}, {1, r.windows, std::nullopt}};
  r.dist->hosts = {{"tb-node0", "10.0.0.1"}, {"tb-node1", "10.0.0.2"}};
  r.telemetry.source = "nvml";
  r.telemetry.samples = 4;
  r.telemetry.power_w_mean = 123.25;
  const run_result back = run_result_from_json(nlohmann::json::parse(run_result_to_json(r).dump()));
  CHECK(back.windows.size() == 2);
  CHECK(back.windows[0].samples_per_s == r.windows[0].samples_per_s);  // bit for bit
  CHECK(back.stages_s.at("forward") == r.stages_s.at("forward"));
  CHECK(back.skipped_steps == std::optional<std::int64_t>(2));
  CHECK(back.skipped_by_cause == r.skipped_by_cause);
  CHECK(back.input_abs_max == r.input_abs_max);
  CHECK(back.memory.host_peak_rss_bytes == r.memory.host_peak_rss_bytes);
  CHECK_FALSE(back.memory.device_peak_allocated_bytes);
  REQUIRE(back.dist);
  CHECK(back.dist->ranks.size() == 2);
  CHECK(back.dist->ranks[0].allreduce_s_median == std::optional<double>(0.001));
  CHECK_FALSE(back.dist->ranks[1].allreduce_s_median);
  REQUIRE(back.dist->hosts.size() == 2);  // a ladder's pooled report still names every rank's host
  CHECK(back.dist->hosts[1].host == "tb-node1");
  CHECK(back.dist->hosts[1].address == "10.0.0.2");
  CHECK(back.telemetry.power_w_mean == std::optional<double>(123.25));
  REQUIRE(back.processes.size() == 1);
  CHECK(back.processes[0].to_first_window_s == r.processes[0].to_first_window_s);
  CHECK(back.processes[0].measured_from_unix_s == r.processes[0].measured_from_unix_s);
  CHECK(back.processes[0].measured_to_unix_s == r.processes[0].measured_to_unix_s);
  CHECK(back.processes[0].warmup_s == r.processes[0].warmup_s);
}

TEST_CASE("rounds pool into one result: windows in order, loss first to last, peaks the largest") {
  const auto dir = tbtest::scratch("pooling");
  const auto state = dir / "rounds/r.json";
  CHECK(read_rounds(state).empty());
  write_rounds(state, {round_of(100, 0.01, 1000, 1)});
  auto rounds = read_rounds(state);
  rounds.push_back(round_of(200, 0.02, 3000, 0));
  rounds.push_back(round_of(300, 0.03, 2000, 2));
  const run_result p = pool_rounds(rounds);
  REQUIRE(p.windows.size() == 6);
  CHECK(p.windows[0].samples_per_s == 100);
  CHECK(p.windows[5].samples_per_s == 301);
  CHECK(p.stages_s.at("forward").size() == 6);
  CHECK(p.loss_first == std::optional<double>(100));
  CHECK(p.loss_last == std::optional<double>(150));
  CHECK(p.skipped_steps == std::optional<std::int64_t>(3));
  CHECK(p.skipped_by_cause == std::optional<std::array<std::int64_t, 3>>({0, 1, 2}));  // summed, cause by cause
  CHECK(p.input_abs_max == std::optional<double>(3.0));                                // the largest
  // A round that saw inf or nan leaves the pooled range unknown, not the others' largest; a round
  // that did not count the causes (an older state file) leaves them out.
  rounds[1].input_abs_max.reset();
  const run_result with_nan = pool_rounds(rounds);
  CHECK(with_nan.skipped_by_cause == p.skipped_by_cause);
  CHECK_FALSE(with_nan.input_abs_max);
  rounds[2].skipped_by_cause.reset();
  CHECK_FALSE(pool_rounds(rounds).skipped_by_cause);
  CHECK(p.memory.host_peak_rss_bytes == std::optional<std::int64_t>(3000));
  CHECK(p.warmup_batches_done == 9);
  CHECK(p.window_batches == 2);
  // Each round is one process: its windows carry its index, its costs sit at that index.
  for (std::size_t i = 0; i < 6; ++i) CHECK(p.windows[i].process == static_cast<int>(i / 2));
  REQUIRE(p.processes.size() == 3);
  CHECK(p.processes[1].to_first_window_s == std::optional<double>(2.0));
}

TEST_CASE("a round that never reached a window still counts as a process, so the pool says how many ran") {
  run_result failed;
  failed.processes = {process_cost{}};
  const run_result p = pool_rounds({round_of(100, 0.01, 1000, 0), failed, round_of(300, 0.03, 2000, 0)});
  REQUIRE(p.processes.size() == 3);
  CHECK_FALSE(p.processes[1].to_first_window_s);
  REQUIRE(p.windows.size() == 4);
  CHECK(p.windows[2].process == 2);  // the third process's windows, not the second's
}

TEST_CASE("a ladder keeps the loader's windows: every round's, with the per-image phases and skipped files") {
  const auto with_loader = [](double rate, double decode_s, std::int64_t replaced) {
    run_result r = round_of(rate, 0.01, 1000, 0);
    r.loader.emplace();
    r.loader->workers = 2;
    r.loader->phases = true;
    r.loader->windows = {{0.5, 64, 0.9, {0.01, decode_s, 0.02}}};
    r.loader->skipped_files = {{"a/b.jpg", "truncated JPEG"}};
    r.loader->replaced_samples = replaced;
    return r;
  };
  const auto dir = tbtest::scratch("pooling-loader");
  write_rounds(dir / "r.json", {with_loader(100, 0.125 / 3, 1), round_of(150, 0.01, 1000, 0)});
  auto rounds = read_rounds(dir / "r.json");
  REQUIRE(rounds.size() == 2);
  REQUIRE(rounds[0].loader);
  CHECK(rounds[0].loader->windows[0].phase_s[1] == 0.125 / 3);  // bit for bit
  CHECK_FALSE(rounds[1].loader);
  rounds.push_back(with_loader(200, 0.05, 2));
  const run_result p = pool_rounds(rounds);
  REQUIRE(p.loader);
  CHECK(p.loader->workers == 2);
  CHECK(p.loader->phases);
  REQUIRE(p.loader->windows.size() == 2);
  CHECK(p.loader->windows[1].phase_s[1] == 0.05);
  // One bad file skipped in two processes is listed once, with the count.
  REQUIRE(p.loader->skipped_files.size() == 1);
  CHECK(p.loader->skipped_files[0].path == "a/b.jpg");
  CHECK(p.loader->skipped_files[0].processes == 2);
  CHECK(p.loader->replaced_samples == 3);
}

TEST_CASE("profile changes name each differing key with both values") {
  const auto dir = tbtest::scratch("profile-diff");
  const auto file = tbtest::tiny_profile(dir);
  const std::string a = to_yaml(load_profile(file).value);
  const std::string b = to_yaml(load_profile(file, {"train.batch_size=8", "measure.repeats=5"}).value);
  const auto changes = profile_changes(a, b);
  REQUIRE(changes.size() == 2);
  CHECK(describe_changes(without_keys(changes, {"measure"})) == "train.batch_size 4 -> 8");
  CHECK(profile_changes(a, a).empty());
  CHECK_THROWS_AS(profile_changes("{", a), input_error);
}
