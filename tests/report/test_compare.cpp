#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

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

TEST_CASE("Mann-Whitney U with ties uses the tie-corrected normal approximation") {
  // Hand computation: pooled ranks 1,2,3.5,3.5 | 5,6,7,8 ... a = {1,2,3,3}, b = {3,4,5,6} -> ties at 3 (three values).
  const auto r = mann_whitney_u({1, 2, 3, 3}, {3, 4, 5, 6});
  // ranks: 1,2,4,4 (a) and 4,6,7,8 (b); R_a = 11, U = 11 - 10 = 1.
  CHECK_FALSE(r.exact);
  CHECK(r.u == Approx(1.0));
  // var = n m / 12 * ((N + 1) - sum(t^3 - t) / (N (N - 1))) = 16/12 * (9 - 24/56)
  const double var = 16.0 / 12.0 * (9.0 - 24.0 / 56.0);
  const double z = (std::abs(1.0 - 8.0) - 0.5) / std::sqrt(var);
  CHECK(r.p == Approx(std::erfc(z / std::sqrt(2.0))));
}

namespace {
json fake_report(const std::string& name, const std::string& hash, const std::vector<double>& rates,
                 const std::string& gpu = "none") {
  json reps = json::array();
  for (double r : rates) reps.push_back({{"samples", 100}, {"elapsed_s", 100.0 / r}, {"samples_per_s", r}});
  return {{"schema_version", 1},
          {"status", "ok"},
          {"profile", {{"name", name}, {"hash", hash}, {"workload_hash", "w-" + name}}},
          {"context",
           {{"gpu", gpu == "none" ? json(nullptr) : json({{"name", gpu}, {"driver", "1"}})},
            {"libtorch", "2.11.0"},
            {"build_type", "Release"}}},
          {"results", {{"repeats", reps}}}};
}
}  // namespace

TEST_CASE("verdicts on constructed reports") {
  const std::vector<double> base{100, 101, 99, 100.5, 99.5, 100.2, 99.8};
  SECTION("A/A is SAME") {
    auto c = compare_reports({fake_report("a", "h", base)}, {fake_report("a", "h", base)}, 3, 0.05);
    REQUIRE(c.rows.size() == 1);
    CHECK(c.rows[0].result == verdict::same);
  }
  SECTION("10% slower with low noise is SLOWER") {
    std::vector<double> slow;
    for (double v : base) slow.push_back(v * 0.9);
    auto c = compare_reports({fake_report("a", "h", base)}, {fake_report("a", "h", slow)}, 3, 0.05);
    CHECK(c.rows[0].result == verdict::slower);
    CHECK(c.rows[0].change_pct == Approx(-10).margin(0.5));
    CHECK(*c.geomean_ratio == Approx(0.9).margin(0.01));
  }
  SECTION("10% faster is FASTER") {
    std::vector<double> fast;
    for (double v : base) fast.push_back(v * 1.1);
    CHECK(compare_reports({fake_report("a", "h", base)}, {fake_report("a", "h", fast)}, 3, 0.05).rows[0].result ==
          verdict::faster);
  }
  SECTION("a noisy small change is AMBIGUOUS") {
    const std::vector<double> noisy_a{80, 120, 95, 105, 130, 70, 100};
    const std::vector<double> noisy_b{78, 118, 93, 103, 128, 68, 98};
    auto c = compare_reports({fake_report("a", "h", noisy_a)}, {fake_report("a", "h", noisy_b)}, 3, 0.05);
    CHECK(c.rows[0].result == verdict::ambiguous);
    CHECK(c.rows[0].reason.find("noisy") != std::string::npos);
  }
  SECTION("too few repeats is AMBIGUOUS and says so") {
    auto c = compare_reports({fake_report("a", "h", {100, 101, 99})}, {fake_report("a", "h", {50, 51, 49})}, 3, 0.05);
    CHECK(c.rows[0].result == verdict::ambiguous);
    CHECK(c.rows[0].reason.find("too few repeats") != std::string::npos);
  }
}

TEST_CASE("matching by hash, by name with a warning, and rows on one side only") {
  const std::vector<double> r{100, 100, 100, 100, 100};
  std::vector<json> base{fake_report("a", "h1", r), fake_report("b", "h2", r), fake_report("only-base", "h3", r)};
  std::vector<json> cand{fake_report("b", "h2", r), fake_report("a", "h1-changed-counts", r),
                         fake_report("only-cand", "h4", r, "H200")};
  auto c = compare_reports(base, cand, 3, 0.05);
  REQUIRE(c.rows.size() == 2);
  CHECK(c.rows[0].name == "a");
  CHECK(c.rows[0].match == "name");
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
  const auto c = compare_reports({fake_report("a", "h", r)}, {cut}, 3, 0.05);
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].candidate.size() == 4);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("candidate run ended with status 'interrupted' after 4 of 5 windows") != std::string::npos);
  CHECK(compare_reports({fake_report("a", "h", r)}, {fake_report("a", "h", r)}, 3, 0.05).warnings.empty());
}
