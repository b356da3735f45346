#include "history/history_fixtures.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "helpers.hpp"
#include "trainbench/history/database.hpp"
#include "trainbench/history/history.hpp"

namespace tbtest {
namespace fs = std::filesystem;
using nlohmann::json;

json make_report(const fake_run& run) {
  json repeats = json::array();
  for (std::size_t i = 0; i < run.rates.size(); ++i) {
    json w = {{"samples", 256}, {"elapsed_s", 256 / run.rates[i]}, {"samples_per_s", run.rates[i]}};
    if (!run.processes.empty()) w["process"] = run.processes.at(i);
    repeats.push_back(w);
  }
  json gpu = nullptr;
  if (!run.gpu.empty())
    gpu = {{"name", run.gpu}, {"uuid", "GPU-0"}, {"driver", run.driver}, {"memory_bytes", 85899345920}};
  const std::string workload = run.workload.empty() ? run.hash : run.workload;
  json results = {{"repeats", repeats}};
  if (run.world > 0) results["distributed"] = {{"world_size", run.world}, {"ranks_in_results", run.world}};
  return {{"schema_version", run.schema_version},
          {"measurement", run.measurement},
          {"tool", {{"name", "trainbench"}, {"version", "0.1.0"}, {"git", "abc1234"}}},
          {"status", run.status},
          {"error", run.status == "ok" ? json(nullptr) : json{{"kind", "runtime"}, {"message", "failed"}}},
          {"context",
           {{"date", run.date},
            {"host", "runner-1"},
            {"cpu", {{"model", "AMD EPYC"}, {"cores", 2}}},
            {"gpu", gpu},
            {"libtorch", "2.11.0"},
            {"cuda", "13.0"},
            {"cudnn", "9.19.0"},
            {"build_type", "Release"}}},
          {"profile",
           {{"name", run.name},
            {"description", run.description},
            {"hash", run.hash},
            {"workload_hash", "w-" + workload},
            {"resolved", "name: " + run.name + "\ndescription: \"" + run.description + "\"\nmodel:\n  arch: w-" +
                             workload + "\n"}}},
          {"results", results}};
}

fs::path write_report(const fs::path& dir, const std::string& file, const fake_run& run) {
  const fs::path path = dir / (file + ".json");
  write_text(path, make_report(run).dump(1));
  return path;
}

std::string sqlite_db(const std::string& test) { return (scratch("history-" + test) / "history.sqlite").string(); }

std::optional<std::string> postgres_db(const std::string& test) {
  const char* base = std::getenv("TRAINBENCH_TEST_POSTGRES_URL");
  if (!base || !*base) {
    std::cout << "trainbench_test_skipped: no PostgreSQL server (TRAINBENCH_TEST_POSTGRES_URL is unset; .ci/run "
                 "starts one with scripts/pg-test-cluster.sh)\n";
    return std::nullopt;
  }
  // Each test in a schema of its own, so tests running at once never see each other's rows.
  const std::string schema = "tb_test_" + test;
  auto admin = trainbench::open_database(base);
  admin->query("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
  admin->query("CREATE SCHEMA " + schema);
  const std::string url = base;
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" + schema;
}

std::string commit_of(int i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "c%011d%028d", i, 0);  // told apart in the first 12 characters too
  return buf;
}

std::string time_of(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "2026-10-%02dT%02d:00:00Z", 1 + i / 24, i % 24);
  return buf;
}

void add_series(const std::string& db, const fs::path& dir, int runs, const std::function<fake_run(int)>& run_of,
                const std::string& branch) {
  for (int i = 0; i < runs; ++i) {
    trainbench::history_add_request req;
    req.db = db;
    req.quiet = true;
    req.inputs = {write_report(dir, "run-" + std::to_string(i) + "-" + branch, run_of(i)).string()};
    req.commit = commit_of(i);
    req.branch = branch;
    req.time = time_of(i);
    trainbench::history_add_command(req);
  }
}

}  // namespace tbtest
