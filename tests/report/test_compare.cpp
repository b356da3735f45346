#include <catch2/catch.hpp>
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
