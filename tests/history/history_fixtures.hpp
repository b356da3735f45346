#pragma once
// Shared by the history tests: constructed run reports, and a fresh database on each backend
// (SQLite always; PostgreSQL when TRAINBENCH_TEST_POSTGRES_URL names a server, as .ci/run does).
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tbtest {

struct fake_run {
  std::string name = "resnet-tiny", hash = "aaaa1111bbbb2222";
  // The workload (a non-default model.arch in the resolved profile; empty: the hash), the
  // description, what was measured and the world size (0: not data-parallel).
  std::string workload, description, measurement = "run";
  int world = 0;
  std::vector<double> rates{1000, 1001, 999, 1000, 1002};
  std::vector<int> processes;  // empty: the field is left out (reports of today)
  std::string status = "ok", driver = "570.86", date = "2026-11-01T10:00:00Z";
  std::string gpu = "NVIDIA H100 80GB HBM3";  // empty: a CPU run
  int schema_version = 1;
};

nlohmann::json make_report(const fake_run& run);
// Writes the report as <dir>/<file>.json and returns its path.
std::filesystem::path write_report(const std::filesystem::path& dir, const std::string& file, const fake_run& run);

// A fresh SQLite file for this test.
std::string sqlite_db(const std::string& test);
// A fresh PostgreSQL schema for this test, or nullopt (after printing the skip line ctest
// counts as skipped) when no server is given.
std::optional<std::string> postgres_db(const std::string& test);

// The commit and time of the i-th run of a constructed series ("c0000000000i000..."), an hour apart.
std::string commit_of(int i);
std::string time_of(int i);
// Adds one report per commit, in process (starting the executable per commit would cost a
// second each): run i is run_of(i), at commit_of(i) and time_of(i) on `branch`.
void add_series(const std::string& db, const std::filesystem::path& dir, int runs,
                const std::function<fake_run(int)>& run_of, const std::string& branch = "main");

}  // namespace tbtest

// One behaviour, tested on each backend: a test case per backend, so ctest lists and skips them apart.
#define HISTORY_TEST(title, fn)                                                       \
  static void fn(const std::string& db);                                              \
  TEST_CASE("history on SQLite: " title, "[history]") { fn(tbtest::sqlite_db(#fn)); } \
  TEST_CASE("history on PostgreSQL: " title, "[history][postgresql]") {               \
    if (const auto db = tbtest::postgres_db(#fn)) fn(*db);                            \
  }                                                                                   \
  static void fn(const std::string& db)
