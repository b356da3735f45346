// What a new user trips over on the tour: quiet output, unwritable folders, misspelt commands,
// several mistakes in one file, relative paths, CPU-only pitfalls, and what a report claims.
#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"

namespace fs = std::filesystem;

TEST_CASE("fp16 on a CPU says it is slow there, and skipped steps are a count with a console line") {
  const auto dir = tbtest::scratch("tour-fp16-cpu");
  const auto file = tbtest::tiny_profile(dir);
  const auto r = tbtest::run_cli("run -c '" + file + "' --set train.amp=fp16");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(tbtest::schema_errors(j).empty());
  CHECK(j["effective"]["notes"].dump().find("train.amp: fp16 on a CPU") != std::string::npos);
  const auto& skipped = j["results"]["amp"]["skipped_steps"];
  REQUIRE(skipped.is_number_integer());
  if (skipped.get<int>() > 0)
    CHECK(r.output.find("skipped " + std::to_string(skipped.get<int>())) != std::string::npos);
}

TEST_CASE("a report says null where nothing was measured, and how noisy its windows were") {
  const auto dir = tbtest::scratch("tour-report-nulls");
  const auto file = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "'").code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["results"]["amp"].is_null());        // no loss scaling
  CHECK(j["results"]["telemetry"].is_null());  // no NVML on a CPU run
  const double cv = j["results"]["samples_per_s"]["cv"];
  CHECK(j["results"]["noise"] == (cv <= 0.10 ? "ok" : cv <= 0.25 ? "noisy" : "very_noisy"));
  CHECK(tbtest::schema_errors(j).empty());
}
