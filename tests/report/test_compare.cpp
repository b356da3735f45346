#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "helpers.hpp"
#include "trainbench/report/compare.hpp"

using namespace trainbench;
using nlohmann::json;

TEST_CASE("Mann-Whitney U, exact distribution for small samples without ties") {
  // Complete separation of 3 vs 3: U = 0, P(U <= 0) = 1/20, two-sided 0.1.
  auto r = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  CHECK(r.exact);
  CHECK(r.u == 0);
  CHECK(r.p == Approx(0.1));
  // 5 vs 5 separated: 2 / C(10,5) = 2/252.
  r = mann_whitney_u({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  CHECK(r.p == Approx(2.0 / 252.0));
  // U counts pairs where the first sample wins: {1,4} vs {2,3}: 4 beats both -> U = 2, the middle.
  r = mann_whitney_u({1, 4}, {2, 3});
  CHECK(r.u == 2);
  CHECK(r.p == Approx(1.0));
  CHECK(smallest_p(3, 3) == Approx(0.1));
  CHECK(smallest_p(5, 5) < 0.05);
}

TEST_CASE("Mann-Whitney U with ties, small samples: exact over the arrangements of the tied ranks") {
  // a = {1,2,3,3}, b = {3,4,5,6}: three values tie at 3, ranks 1,2,4,4 (a) and 4,6,7,8 (b); U = 11 - 10 = 1.
  const auto r = mann_whitney_u({1, 2, 3, 3}, {3, 4, 5, 6});
  CHECK(r.exact);
  CHECK(r.ties);
  CHECK(r.u == Approx(1.0));
  // Rank sums of a at most 11 over the C(8,4) = 70 ways to pick a's four ranks from {1,2,4,4,4,6,7,8}:
  // {1,2,4,4} three ways (two of the three 4s), so P(R <= 11) = 3/70 (R = 10 is impossible); two-sided 6/70.
  CHECK(r.p == Approx(6.0 / 70.0));
}

namespace {
// Each rate is one process's (its only window), so the rates are what a process-level test ranks.
json fake_report(const std::string& name, const std::string& hash, const std::vector<double>& rates,
                 const std::string& gpu = "none") {
  json reps = json::array();
  int process = 0;
  for (double r : rates)
    reps.push_back({{"samples", 100}, {"elapsed_s", 100.0 / r}, {"samples_per_s", r}, {"process", process++}});
  return {{"schema_version", 1},
          {"status", "ok"},
          {"profile", {{"name", name}, {"hash", hash}, {"workload_hash", "w-" + name}}},
          {"context",
           {{"gpu", gpu == "none" ? json(nullptr) : json({{"name", gpu}, {"driver", "1"}})},
            {"libtorch", "2.11.0"},
            {"build_type", "Release"}}},
          {"results", {{"repeats", reps}}}};
}
// The same rates as windows of one process.
json one_process(json report) {
  for (auto& w : report["results"]["repeats"]) w["process"] = 0;
  return report;
}

compare_options options(double threshold, double alpha, bool family = true,
                        evidence_level level = evidence_level::process) {
  compare_options o;
  o.threshold_pct = threshold;
  o.alpha = alpha;
  o.family_correction = family;
  o.level = level;
  return o;
}
}  // namespace

TEST_CASE("verdicts on constructed reports") {
  const std::vector<double> base{100, 101, 99, 100.5, 99.5, 100.2, 99.8};
  SECTION("A/A is SAME") {
    auto c = compare_reports({fake_report("a", "h", base)}, {fake_report("a", "h", base)}, options(3, 0.05));
    REQUIRE(c.rows.size() == 1);
    CHECK(c.rows[0].result == verdict::same);
  }
  SECTION("10% slower with low noise is SLOWER") {
    std::vector<double> slow;
    for (double v : base) slow.push_back(v * 0.9);
    auto c = compare_reports({fake_report("a", "h", base)}, {fake_report("a", "h", slow)}, options(3, 0.05));
    CHECK(c.rows[0].result == verdict::slower);
    CHECK(c.rows[0].change_pct == Approx(-10).margin(0.5));
    CHECK(*c.geomean_ratio == Approx(0.9).margin(0.01));
  }
  SECTION("10% faster is FASTER") {
    std::vector<double> fast;
    for (double v : base) fast.push_back(v * 1.1);
    CHECK(compare_reports({fake_report("a", "h", base)}, {fake_report("a", "h", fast)}, options(3, 0.05))
              .rows[0]
              .result == verdict::faster);
  }
  SECTION("a noisy small change is AMBIGUOUS") {
    const std::vector<double> noisy_a{80, 120, 95, 105, 130, 70, 100};
    const std::vector<double> noisy_b{78, 118, 93, 103, 128, 68, 98};
    auto c = compare_reports({fake_report("a", "h", noisy_a)}, {fake_report("a", "h", noisy_b)}, options(3, 0.05));
    CHECK(c.rows[0].result == verdict::ambiguous);
    CHECK(c.rows[0].reason.find("reaches beyond ±3%") != std::string::npos);
    CHECK(c.rows[0].reason.find("process medians' cv") != std::string::npos);
  }
  SECTION("too few processes is AMBIGUOUS and says so") {
    auto c = compare_reports({fake_report("a", "h", {100, 101, 99})}, {fake_report("a", "h", {50, 51, 49})},
                             options(3, 0.05));
    CHECK(c.rows[0].result == verdict::ambiguous);
    CHECK(c.rows[0].reason.find("too few processes (3 vs 3)") != std::string::npos);
    CHECK(c.rows[0].to_decide == std::size_t{4});
  }
}

TEST_CASE("matching by hash, by name with a warning, and rows on one side only") {
  const std::vector<double> r{100, 100, 100, 100, 100};
  std::vector<json> base{fake_report("a", "h1", r), fake_report("b", "h2", r), fake_report("only-base", "h3", r)};
  std::vector<json> cand{fake_report("b", "h2", r), fake_report("a", "h1-changed-counts", r),
                         fake_report("only-cand", "h4", r, "H200")};
  auto c = compare_reports(base, cand, options(3, 0.05));
  REQUIRE(c.rows.size() == 2);
  CHECK(c.rows[0].name == "a");
  CHECK(c.rows[0].match == "workload");
  CHECK(c.rows[1].match == "hash");
  CHECK(c.only_base == std::vector<std::string>{"only-base"});
  CHECK(c.only_candidate == std::vector<std::string>{"only-cand"});
  CHECK_FALSE(c.warnings.empty());
  const std::string md = format_comparison(c, "markdown");
  CHECK(md.find("| profile |") != std::string::npos);
  CHECK(md.find("only in base: only-base") != std::string::npos);
  CHECK(json::parse(format_comparison(c, "json"))["rows"].size() == 2);
}

TEST_CASE("compare on folders: exit 1 on SLOWER, 0 otherwise, 2 on bad input") {
  const auto dir = tbtest::scratch("compare");
  std::filesystem::create_directories(dir / "base");
  std::filesystem::create_directories(dir / "cand");
  const std::vector<double> base{100, 101, 99, 100.5, 99.5, 100.2, 99.8};
  std::vector<double> slow;
  for (double v : base) slow.push_back(v * 0.8);
  std::ofstream(dir / "base/a.json") << fake_report("a", "h", base).dump();
  std::ofstream(dir / "cand/a.json") << fake_report("a", "h", slow).dump();
  auto r = tbtest::run_cli("compare '" + (dir / "base").string() + "' '" + (dir / "cand").string() + "'");
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("SLOWER") != std::string::npos);
  r = tbtest::run_cli("compare '" + (dir / "base").string() + "' '" + (dir / "base").string() + "' --format markdown");
  CHECK(r.code == 0);
  std::ofstream(dir / "v9.json") << json({{"schema_version", 9}}).dump();
  r = tbtest::run_cli("compare '" + (dir / "base").string() + "' '" + (dir / "v9.json").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("schema_version") != std::string::npos);
  r = tbtest::run_cli("compare '" + (dir / "base").string() + "' '" + (dir / "missing.json").string() + "'");
  CHECK(r.code == 2);
}

TEST_CASE("the interval of a change: Hodges-Lehmann estimate and the exact Mann-Whitney bounds") {
  // Log-rates 0.01 apart: the pairwise log-ratios are log(1.1) + 0.01 * (i - j), i, j in 0..4.
  std::vector<double> base, candidate;
  for (int i = 0; i < 5; ++i) {
    base.push_back(100.0 * std::exp(0.01 * i));
    candidate.push_back(110.0 * std::exp(0.01 * i));
  }
  const auto ci = interval_of_change(base, candidate, 0.95);
  REQUIRE(ci);
  CHECK(ci->estimate_pct == Approx(10.0));
  // 5 vs 5 at 95%: P(U <= 2) = 4/252 <= 0.025 < P(U <= 3) = 7/252, so the 3rd smallest and 3rd
  // largest of the 25 differences, which are -3 and +3 steps of 0.01.
  CHECK(ci->low_pct == Approx(100.0 * (1.1 * std::exp(-0.03) - 1.0)));
  CHECK(ci->high_pct == Approx(100.0 * (1.1 * std::exp(0.03) - 1.0)));
  // 3 vs 3 cannot reach 95% (the smallest two-sided p is 0.1), but can reach 80%.
  CHECK_FALSE(interval_of_change({1, 2, 3}, {4, 5, 6}, 0.95));
  REQUIRE(interval_of_change({1, 2, 3}, {4, 5, 6}, 0.80));
  // Large samples use the normal approximation and still cover the shift.
  std::vector<double> big_base, big_candidate;
  for (int i = 0; i < 30; ++i) {
    big_base.push_back(100.0 + (i * 7) % 11);
    big_candidate.push_back(95.0 + (i * 5) % 11);
  }
  const auto wide = interval_of_change(big_base, big_candidate, 0.95);
  REQUIRE(wide);
  CHECK(wide->low_pct < wide->estimate_pct);
  CHECK(wide->estimate_pct < wide->high_pct);
  CHECK(wide->high_pct < 0.0);  // a 5% drop on 11 levels of spread is clear at n = 30
  CHECK(wide->low_pct > -12.0);
}

TEST_CASE("a partial run is compared on the windows it finished, with a warning that says so") {
  const std::vector<double> r{100, 101, 99, 100.5, 99.5};
  json cut = fake_report("a", "h", {100, 101, 99, 100.5});
  cut["status"] = "interrupted";
  cut["measure"] = {{"repeats", 5}};
  const auto c = compare_reports({fake_report("a", "h", r)}, {cut}, options(3, 0.05));
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].candidate.size() == 4);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("candidate run ended with status 'interrupted' after 4 of 5 windows") != std::string::npos);
  CHECK(compare_reports({fake_report("a", "h", r)}, {fake_report("a", "h", r)}, options(3, 0.05)).warnings.empty());
}

namespace {
std::vector<double> times(const std::vector<double>& v, double factor) {
  std::vector<double> out;
  for (double x : v) out.push_back(x * factor);
  return out;
}
std::string folder_args(const std::filesystem::path& dir) {
  return "'" + (dir / "base").string() + "' '" + (dir / "cand").string() + "'";
}
}  // namespace

TEST_CASE("Holm's correction across profiles: raw and adjusted p per row, --no-family-correction turns it off") {
  // Three profiles 5 against 5, each 5% slower and separated: raw p = 2/252 = 0.0079 each. Holm
  // multiplies the smallest by 3 (0.024 < 0.05): all three stay SLOWER. With eight such
  // profiles the first step needs p < 0.05 / 8 = 0.00625, which 5 windows cannot reach.
  const std::vector<double> base{100, 100.4, 99.6, 100.2, 99.8};
  std::vector<json> b, c;
  for (int i = 0; i < 3; ++i) {
    b.push_back(fake_report("p" + std::to_string(i), "h" + std::to_string(i), base));
    c.push_back(fake_report("p" + std::to_string(i), "h" + std::to_string(i), times(base, 0.95)));
  }
  auto three = compare_reports(b, c, options(3, 0.05));
  REQUIRE(three.rows.size() == 3);
  for (const auto& r : three.rows) {
    CHECK(r.result == verdict::slower);
    CHECK(r.test.p == Approx(2.0 / 252));
    CHECK(r.p_adjusted == Approx(3 * 2.0 / 252));
    CHECK(r.family_size == 3);
  }
  for (int i = 3; i < 8; ++i) {
    b.push_back(fake_report("p" + std::to_string(i), "h" + std::to_string(i), base));
    c.push_back(fake_report("p" + std::to_string(i), "h" + std::to_string(i), times(base, 0.95)));
  }
  const auto eight = compare_reports(b, c, options(3, 0.05));
  for (const auto& r : eight.rows) {
    CHECK(r.result == verdict::ambiguous);
    CHECK(r.reason.find("after Holm's correction over 8 profiles") != std::string::npos);
  }
  bool warned = false;
  for (const auto& w : eight.warnings)
    warned = warned || w.find("6 processes per side can reach p = 0.00216") != std::string::npos;
  CHECK(warned);
  const auto alone = compare_reports(b, c, options(3, 0.05, false));
  for (const auto& r : alone.rows) {
    CHECK(r.result == verdict::slower);
    CHECK(r.p_adjusted == r.test.p);
  }

  // The command line: exit 0 with the correction (nothing SLOWER), 1 without it.
  const auto dir = tbtest::scratch("compare-family");
  std::filesystem::create_directories(dir / "base");
  std::filesystem::create_directories(dir / "cand");
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::ofstream(dir / "base" / ("p" + std::to_string(i) + ".json")) << b[i].dump();
    std::ofstream(dir / "cand" / ("p" + std::to_string(i) + ".json")) << c[i].dump();
  }
  auto r = tbtest::run_cli("compare " + folder_args(dir) + " --format json");
  INFO(r.output);
  CHECK(r.code == 0);
  const json j = json::parse(r.output.substr(r.output.find('{')));
  CHECK(j["family_correction"] == "holm");
  CHECK(j["family_size"] == 8);
  CHECK(j["rows"][0]["p"].get<double>() == Approx(2.0 / 252));
  CHECK(j["rows"][0]["p_adjusted"].get<double>() == Approx(8 * 2.0 / 252));
  CHECK(j["rows"][0]["exact"] == true);
  r = tbtest::run_cli("compare " + folder_args(dir) + " --no-family-correction");
  CHECK(r.code == 1);
  CHECK(r.output.find("SLOWER") != std::string::npos);
}

TEST_CASE("compare exits 2 when nothing could be compared, naming the keys that differ") {
  const auto dir = tbtest::scratch("compare-nothing");
  std::filesystem::create_directories(dir / "base");
  std::filesystem::create_directories(dir / "cand");
  const std::vector<double> r{100, 101, 99, 100.5, 99.5};
  json a = fake_report("quickstart", "h1", r);
  a["profile"]["resolved"] = "name: quickstart\ntrain:\n  batch_size: 32\n  optimizer: {name: sgd, lr: 0.001}\n";
  json b = fake_report("quickstart", "h2", r);
  b["profile"]["workload_hash"] = "w-other";
  b["profile"]["resolved"] = "name: quickstart\ntrain:\n  batch_size: 64\n  optimizer: {name: sgd, lr: 0.001}\n";
  std::ofstream(dir / "base/q.json") << a.dump();
  std::ofstream(dir / "cand/q.json") << b.dump();
  const auto out = tbtest::run_cli("compare " + folder_args(dir));
  INFO(out.output);
  CHECK(out.code == 2);
  CHECK(out.output.find("no profile could be compared") != std::string::npos);
  CHECK(out.output.find("not compared: quickstart: the profiles differ in train.batch_size: 32 vs 64") !=
        std::string::npos);
  CHECK(out.output.find("optimizer") == std::string::npos);      // only what differs
  CHECK(out.output.find("only in base:") == std::string::npos);  // listed once, as not compared
  CHECK(out.output.find("1 with the same name but another profile") != std::string::npos);
  CHECK(profile_differences("a: 1\nb: {c: [1, 2]}\n", "a: 1\nb: {c: [1, 3]}\nd: x\n") ==
        std::vector<std::string>{"b.c: [1, 2] vs [1, 3]", "d: (absent) vs x"});
}

TEST_CASE("compare of bottleneck folders skips bottleneck.json, and the Markdown verdict escapes '|'") {
  const auto dir = tbtest::scratch("compare-bottleneck");
  const std::vector<double> r{100, 101, 99, 100.5, 99.5, 100.2, 99.8};
  for (const char* side : {"base", "cand"}) {
    std::filesystem::create_directories(dir / side);
    const double f = std::string(side) == "base" ? 1.0 : 0.8;
    std::ofstream(dir / side / "loop.json") << fake_report("loop|a", "h", times(r, f)).dump();  // a '|' to escape
    std::ofstream(dir / side / "ceiling.json") << fake_report("p-ceiling", "hc", r).dump();
    std::ofstream(dir / side / "bottleneck.json") << json({{"profile", "p"}, {"verdict", "COMPUTE-BOUND"}}).dump();
  }
  const auto out = tbtest::run_cli("compare " + folder_args(dir) + " --format markdown");
  INFO(out.output);
  CHECK(out.code == 1);  // the loop got 20% slower
  CHECK(out.output.find("skipped, not a run report: ") != std::string::npos);
  CHECK(out.output.find("bottleneck.json") != std::string::npos);
  // Every table row has exactly the header's 10 unescaped bars.
  std::istringstream lines(out.output);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("| p", 0) != 0 && line.rfind("| loop", 0) != 0) continue;
    int bars = 0;
    for (std::size_t i = 0; i < line.size(); ++i) bars += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
    CHECK(bars == 10);
    ++rows;
  }
  CHECK(rows == 3);  // header, loop|a, p-ceiling
  // A report named directly is still checked strictly.
  CHECK(tbtest::run_cli("compare '" + (dir / "base/bottleneck.json").string() + "' '" +
                        (dir / "cand/loop.json").string() + "'")
            .code == 2);
}

TEST_CASE("compare fails the gate when a candidate run measured no window, whatever else matched") {
  const auto dir = tbtest::scratch("compare-crashed");
  std::filesystem::create_directories(dir / "base");
  std::filesystem::create_directories(dir / "cand");
  const std::vector<double> r{100, 101, 99, 100.5, 99.5};
  std::ofstream(dir / "base/a.json") << fake_report("a", "ha", r).dump();
  std::ofstream(dir / "cand/a.json") << fake_report("a", "ha", r).dump();
  std::ofstream(dir / "base/b.json") << fake_report("b", "hb", r).dump();
  json crashed = fake_report("b", "hb", {});
  crashed["status"] = "error";
  std::ofstream(dir / "cand/b.json") << crashed.dump();
  const auto out = tbtest::run_cli("compare " + folder_args(dir));
  INFO(out.output);
  CHECK(out.code == 1);
  CHECK(out.output.find("the candidate run of 'b' measured no window") != std::string::npos);
  // Also when it is the only profile: a crashed candidate, not bad input (exit 1, not 2).
  const auto alone =
      tbtest::run_cli("compare '" + (dir / "base/b.json").string() + "' '" + (dir / "cand/b.json").string() + "'");
  INFO(alone.output);
  CHECK(alone.code == 1);
  CHECK(alone.output.find("the candidate run of 'b' measured no window") != std::string::npos);
}

TEST_CASE("one process of many windows is one observation: the process level never decides on it") {
  // Seven windows of one process per side, 20% apart: the window-level test calls it SLOWER, but
  // those windows share their process's luck, so at the process level it is 1 against 1.
  const std::vector<double> base{100, 101, 99, 100.5, 99.5, 100.2, 99.8};
  std::vector<double> slow;
  for (double v : base) slow.push_back(v * 0.8);
  const auto c = compare_reports({one_process(fake_report("a", "h", base))}, {one_process(fake_report("a", "h", slow))},
                                 options(3, 0.05));
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].level == evidence_level::process);
  CHECK(c.rows[0].result == verdict::ambiguous);
  CHECK(c.rows[0].reason.find("too few processes (1 vs 1)") != std::string::npos);
  CHECK(c.rows[0].reason.find("share their process's luck") != std::string::npos);
  CHECK(c.rows[0].to_decide == std::size_t{4});
  // The window level, asked for, tests the windows and says what it assumes.
  const auto w = compare_reports({one_process(fake_report("a", "h", base))}, {one_process(fake_report("a", "h", slow))},
                                 options(3, 0.05, true, evidence_level::window));
  CHECK(w.rows[0].result == verdict::slower);
  const json j = json::parse(format_comparison(w, "json"));
  CHECK(j["level"] == "window");
  CHECK(j["assumes"].get<std::string>().find("only for windows of one process") != std::string::npos);
  CHECK(j["rows"][0]["base_processes"] == 1);
  CHECK(j["rows"][0]["base_windows"] == 7);
}

TEST_CASE("a process is ranked by its median window, and reports of one profile on a side pool as processes") {
  // Five one-process reports per side, each of three windows; one wild window per process moves
  // its mean but not its median.
  std::vector<json> base, cand;
  for (int i = 0; i < 5; ++i) {
    const double b = 100 + 0.2 * i, c = 90 + 0.2 * i;
    base.push_back(one_process(fake_report("a", "h", {b, b + 0.1, b + 50})));
    cand.push_back(one_process(fake_report("a", "h", {c, c + 0.1, c - 50})));
  }
  const auto c = compare_reports(base, cand, options(3, 0.05));
  REQUIRE(c.rows.size() == 1);
  const pair_row& r = c.rows[0];
  CHECK(r.base_units.size() == 5);
  CHECK(r.candidate_units.size() == 5);
  CHECK(r.base_units[0] == Approx(100.1));
  CHECK(r.result == verdict::slower);
  CHECK(r.test.p == Approx(2.0 / 252));
  bool pooled = false;
  for (const auto& w : c.warnings)
    pooled = pooled || w.find("5 base reports of this profile pooled (5 processes)") != std::string::npos;
  CHECK(pooled);
}

TEST_CASE("compare matches what was measured and the world size, not only the profile") {
  const std::vector<double> r{100, 101, 99, 100.5, 99.5};
  json run = fake_report("a", "h", r);
  json data = fake_report("a", "h", times(r, 20));
  data["measurement"] = "bench-data";
  json two = fake_report("a", "h", times(r, 2));
  two["results"]["distributed"] = {{"world_size", 2}};
  // A bench-data report never stands in for a training run, nor 2 ranks for 1.
  for (const json& other : {data, two}) {
    const auto c = compare_reports({run}, {other}, options(3, 0.05));
    CHECK(c.rows.empty());
    REQUIRE(c.unmatched.size() == 1);
    CHECK(c.unmatched[0].differences.front().find(other == data ? "measured: run vs bench-data"
                                                                : "world size: 1 vs 2") != std::string::npos);
  }
  // Reports from before the field: one without a model was bench-data.
  json old = fake_report("a", "h", r);
  old["model"] = {{"parameters", 0}};
  CHECK(measurement_of(old) == "bench-data");
  CHECK(measurement_of(fake_report("a", "h", r)) == "run");
  CHECK(compare_reports({data}, {old}, options(3, 0.05)).rows.size() == 1);
}

TEST_CASE("one rank's windows of a two-rank job are not compared with the job's: the candidate measured nothing") {
  const std::vector<double> r{100, 101, 99, 100.5, 99.5};
  json job = fake_report("a", "h", times(r, 2));
  job["results"]["distributed"] = {{"world_size", 2}, {"ranks_in_results", 2}};
  json one_rank = fake_report("a", "h", r);  // half the job's rate, no slower per rank
  one_rank["status"] = "error";
  one_rank["results"]["distributed"] = {{"world_size", 2}, {"ranks_in_results", 1}};
  const auto c = compare_reports({job}, {one_rank}, options(3, 0.05));
  REQUIRE(c.rows.size() == 1);  // the same job, so the same row
  CHECK(c.rows[0].candidate.empty());
  CHECK(c.rows[0].result == verdict::ambiguous);  // never SLOWER; compare_command fails it: no window
  bool said = false;
  for (const auto& w : c.warnings) said = said || w.find("1 of its 2 ranks' windows") != std::string::npos;
  CHECK(said);
}

TEST_CASE("reports from before processes load: without process ids a report is one process") {
  json old = fake_report("a", "h", {100, 101, 99, 100.5, 99.5});
  for (auto& w : old["results"]["repeats"]) w.erase("process");
  const auto c = compare_reports({old}, {old}, options(3, 0.05));
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].base_units.size() == 1);
  CHECK(c.rows[0].result == verdict::ambiguous);
  CHECK(c.rows[0].reason.find("too few processes (1 vs 1)") != std::string::npos);
  // Two such reports of the profile on a side are two processes.
  const auto two = compare_reports({old, old}, {old, old}, options(3, 0.05));
  CHECK(two.rows[0].base_units.size() == 2);
}

TEST_CASE("compare matches a 1-process reference with a 2-process ladder rung: the plan is not the workload") {
  json ref = fake_report("00-baseline", "h1", {100});
  ref["profile"]["resolved"] = "name: 00-baseline\ntrain:\n  batch_size: 64\nmeasure:\n  processes: 1\n";
  json rung = fake_report("00-baseline", "h2", {101, 99});
  rung["profile"]["resolved"] = "name: 00-baseline\ntrain:\n  batch_size: 64\nmeasure:\n  processes: 2\n";
  const auto c = compare_reports({ref}, {rung}, options(3, 0.05));
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].match == "workload");
  CHECK(c.unmatched.empty());
  bool named = false;
  for (const auto& w : c.warnings) named = named || w.find("measure.processes: 1 vs 2") != std::string::npos;
  CHECK(named);
  // A renamed profile of the same workload is matched too.
  json renamed = rung;
  renamed["profile"]["name"] = "00-baseline-renamed";
  CHECK(compare_reports({ref}, {renamed}, options(3, 0.05)).rows.size() == 1);
}
