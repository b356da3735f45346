// The process as the unit of evidence, end to end: run in fresh processes, the report's windows
// by process and its noise by level, several profiles interleaved, plan, and bench-data's report
// beside run's.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "helpers.hpp"
#include "trainbench/commands/fresh_processes.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

TEST_CASE("run --processes 3: one report, every window with its process, the noise by level and the costs") {
  const auto dir = tbtest::scratch("processes-run");
  const auto r = tbtest::run_cli("run -c '" + tbtest::tiny_profile(dir) + "' --processes 3");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const json j = tbtest::read_json(dir / "tiny.json");
  CHECK(tbtest::schema_errors(j).empty());
  CHECK(j["measurement"] == "run");
  CHECK(j["measure"]["processes"] == 3);
  std::multiset<int> processes;
  for (const auto& w : j["results"]["repeats"]) processes.insert(w["process"].get<int>());
  CHECK(processes == std::multiset<int>{0, 0, 1, 1, 2, 2});  // two windows from each of three processes
  const json& p = j["results"]["processes"];
  CHECK(p["count"] == 3);
  CHECK(p["measured"] == 3);
  CHECK(p["within_process_cv"].is_number());
  CHECK(p["between_process_cv"].is_number());
  CHECK(p["icc"].is_number());
  CHECK_FALSE(p.contains("note"));
  REQUIRE(p["per_process"].size() == 3);
  for (const auto& one : p["per_process"]) {
    CHECK(one["windows"] == 2);
    // Loading, building and warming up come before the first window, each measured.
    CHECK(one["before_first_window_s"].get<double>() >= one["warmup_s"].get<double>());
    CHECK(one["build_s"].get<double>() > 0);
  }
  // The console shows the pooled result once, with the split beside the cv.
  CHECK(r.output.find("processes    3 fresh: cv ") != std::string::npos);
  CHECK(r.output.find("== tiny (process 3/3)") != std::string::npos);
  CHECK(r.output.find("3 of 3 processes pooled in") != std::string::npos);
}

TEST_CASE("a single-process report is one process, and says the noise between processes is unknown") {
  const auto dir = tbtest::scratch("processes-one");
  const auto r = tbtest::run_cli("run -c '" + tbtest::tiny_profile(dir) + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const json j = tbtest::read_json(dir / "tiny.json");
  const json& p = j["results"]["processes"];
  CHECK(p["count"] == 1);
  CHECK(p["between_process_cv"].is_null());
  CHECK(p["note"].get<std::string>().find("noise between processes is unknown") != std::string::npos);
  for (const auto& w : j["results"]["repeats"]) CHECK(w["process"] == 0);
  CHECK(r.output.find("processes    1: the noise between processes is unknown") != std::string::npos);
}

TEST_CASE("several profiles given together run interleaved, process by process") {
  const auto dir = tbtest::scratch("processes-interleaved");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "a.yaml", "extends: tiny.yaml\nname: a\n");
  tbtest::write_text(dir / "b.yaml", "extends: tiny.yaml\nname: b\ntrain: {batch_size: 2}\n");
  const std::string configs = "-c '" + (dir / "a.yaml").string() + "' -c '" + (dir / "b.yaml").string() + "'";
  // Two profiles cannot share one --out.
  auto refused = tbtest::run_cli("run " + configs + " --processes 2 --out '" + (dir / "one.json").string() + "'");
  CHECK(refused.code == 2);
  CHECK(refused.output.find("put {name} in the path") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "one.json"));
  const auto r = tbtest::run_cli("run " + configs + " --set measure.processes=2 --out '" +
                                 (dir / "out/{name}.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto order = [&](const std::string& line) { return r.output.find(line); };
  CHECK(order("== a (process 1/2)") < order("== b (process 1/2)"));
  CHECK(order("== b (process 1/2)") < order("== a (process 2/2)"));
  CHECK(order("== a (process 2/2)") < order("== b (process 2/2)"));
  for (const char* name : {"a", "b"}) {
    const json j = tbtest::read_json(dir / "out" / (std::string(name) + ".json"));
    CHECK(j["profile"]["name"] == name);
    CHECK(j["results"]["processes"]["count"] == 2);
  }
}

TEST_CASE("plan: from a report of both levels, the processes and windows a budget should buy") {
  const auto dir = tbtest::scratch("processes-plan");
  const auto file = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "' --processes 3 --set measure.repeats=3").code == 0);
  const std::string report = (dir / "tiny.json").string();
  const auto text = tbtest::run_cli("plan '" + report + "' --budget 10m");
  INFO(text.output);
  REQUIRE(text.code == 0);
  CHECK(text.output.find("within a process") != std::string::npos);
  CHECK(text.output.find("trainbench run -c ") != std::string::npos);
  const auto as_json = tbtest::run_cli("plan '" + report + "' --budget 10m --format json");
  REQUIRE(as_json.code == 0);
  const json j = json::parse(as_json.output.substr(as_json.output.find('{')));
  CHECK(j["measured"]["processes"] == 3);
  CHECK(j["min_processes"] == 4);
  REQUIRE(j["best"].is_object());
  CHECK(j["best"]["processes"].get<int>() >= 4);
  CHECK(j["best"]["seconds"].get<double>() <= 600);
  // The best plan is the narrowest of those listed.
  for (const auto& c : j["choices"])
    CHECK(j["best"]["half_width_95"].get<double>() <= c["half_width_95"].get<double>());
  // A folder of one-process reports of the profile (the CI recipe's loop) is as good.
  for (int i = 1; i <= 3; ++i)
    REQUIRE(tbtest::run_cli("run -q -c '" + file + "' --set measure.repeats=3 --out '" +
                            (dir / "loop" / ("r" + std::to_string(i) + ".json")).string() + "'")
                .code == 0);
  const auto folder = tbtest::run_cli("plan '" + (dir / "loop").string() + "' --format json");
  INFO(folder.output);
  REQUIRE(folder.code == 0);
  CHECK(json::parse(folder.output.substr(folder.output.find('{')))["measured"]["processes"] == 3);
  // The --processes report of the same workload joins them (how many processes measured it is the
  // plan, not the workload); a report of another batch size is another profile.
  fs::copy_file(dir / "tiny.json", dir / "loop" / "same.json");
  const auto joined = tbtest::run_cli("plan '" + (dir / "loop").string() + "' --format json");
  INFO(joined.output);
  REQUIRE(joined.code == 0);
  CHECK(json::parse(joined.output.substr(joined.output.find('{')))["measured"]["processes"] == 6);
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "' --set train.batch_size=2 --set measure.repeats=3 --out '" +
                          (dir / "loop" / "other.json").string() + "'")
              .code == 0);
  const auto mixed = tbtest::run_cli("plan '" + (dir / "loop").string() + "'");
  CHECK(mixed.code == 2);
  CHECK(mixed.output.find("more than one profile") != std::string::npos);
  // Bad input: a one-process report, a budget that is not a duration, no such file.
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "' --out '" + (dir / "one.json").string() + "'").code == 0);
  const auto one = tbtest::run_cli("plan '" + (dir / "one.json").string() + "'");
  CHECK(one.code == 2);
  CHECK(one.output.find("one.json' measured one process") != std::string::npos);
  const auto bad = tbtest::run_cli("plan '" + report + "' --budget soon");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("--budget 'soon'") != std::string::npos);
  CHECK(tbtest::run_cli("plan '" + (dir / "missing.json").string() + "'").code == 2);
}

TEST_CASE("bench-data writes beside run's report, not over it, and says what it measured") {
  const auto dir = tbtest::scratch("processes-bench-data");
  const auto file = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "'").code == 0);
  const auto r = tbtest::run_cli("bench-data -q -c '" + file + "' --processes 2");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(tbtest::read_json(dir / "tiny.json")["measurement"] == "run");
  const json data = tbtest::read_json(dir / "tiny.bench-data.json");
  CHECK(data["measurement"] == "bench-data");
  CHECK(data["results"]["processes"]["count"] == 2);
  CHECK(tbtest::schema_errors(data).empty());
  // compare never sets the loader's throughput against training's.
  const auto c = tbtest::run_cli("compare '" + (dir / "tiny.json").string() + "' '" +
                                 (dir / "tiny.bench-data.json").string() + "'");
  CHECK(c.code == 2);
  CHECK(c.output.find("measured: run vs bench-data") != std::string::npos);
}

TEST_CASE("several profiles without --processes: each report says the processes it holds") {
  const auto dir = tbtest::scratch("processes-label");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "a.yaml", "extends: tiny.yaml\nname: a\nmeasure: {processes: 2, repeats: 1}\n");
  tbtest::write_text(dir / "b.yaml", "extends: tiny.yaml\nname: b\nmeasure: {repeats: 1}\n");
  const auto r = tbtest::run_cli("run -q -c '" + (dir / "a.yaml").string() + "' -c '" + (dir / "b.yaml").string() +
                                 "' --out '" + (dir / "out/{name}.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  for (const char* name : {"a", "b"}) {
    const json j = tbtest::read_json(dir / "out" / (std::string(name) + ".json"));
    INFO(name);
    CHECK(j["results"]["processes"]["count"] == 2);
    CHECK(j["measure"]["processes"] == 2);  // b's profile says 1; it ran as many as a asked for
  }
}

TEST_CASE("each of several processes writes its own trace and weights") {
  using trainbench::process_file;
  CHECK(process_file("reports/trace.json", 0) == "reports/trace.json");
  CHECK(process_file("", 2).empty());
  CHECK(process_file("reports/trace.json", 2) == "reports/trace-process2.json");
  CHECK(process_file("w{rank}.pt", 1) == "w{rank}-process1.pt");
  CHECK(process_file("t/{process}/trace.json", 3) == "t/3/trace.json");
  CHECK(trainbench::rank_state_file("r/processes/a.json", 0, 1) == fs::path("r/processes/a.json"));
  CHECK(trainbench::rank_state_file("r/processes/a.json", 1, 2) == fs::path("r/processes/a.rank1.json"));
  CHECK(trainbench::rank_state_file("r/processes/a{rank}.json", 0, 2) == fs::path("r/processes/a0.rank0.json"));

  const auto dir = tbtest::scratch("processes-outputs");
  const auto r =
      tbtest::run_cli("run -q -c '" + tbtest::tiny_profile(dir) + "' --processes 2 --set measure.repeats=1 --trace '" +
                      (dir / "trace.json").string() + "' --save-weights '" + (dir / "w-{process}.pt").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_FALSE(fs::exists(dir / "trace.json"));
  for (const char* k : {"1", "2"}) {
    const fs::path trace = dir / ("trace-process" + std::string(k) + ".json");
    REQUIRE(fs::exists(trace));
    CHECK_FALSE(tbtest::read_json(trace)["traceEvents"].empty());
    CHECK(fs::file_size(dir / ("w-" + std::string(k) + ".pt")) > 0);
  }
}
