// trainbench history on each backend: add, show, the environment along a series, change points
// at the right commit, and bad input that leaves the database as it was.
#include <catch2/catch.hpp>
#include <cstdio>
#include <iostream>
#include <set>

#include "helpers.hpp"
#include "history/history_fixtures.hpp"
#include "trainbench/history/history.hpp"
#include "trainbench/history/import.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

using namespace trainbench;
using namespace tbtest;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A series with a 6% drop at commit 30 of 45, when the driver changed too.
fake_run driver_step(int i) {
  fake_run r;
  const double level = i < 30 ? 1000 : 940;
  const double wobble = (i * 37 % 11 - 5) * 0.8;  // deterministic scatter of about 0.3%
  r.rates = {level + wobble, level + wobble + 2, level + wobble - 2, level + wobble + 1, level + wobble - 1};
  r.driver = i < 30 ? "570.86" : "575.51";
  r.date = time_of(i);
  return r;
}

json show_json(const std::string& db, const std::string& extra = "") {
  const auto r = run_cli("history show --db '" + db + "' --format json " + extra);
  INFO(r.output);
  REQUIRE(r.code == 0);
  return json::parse(r.output.substr(r.output.find('{')));
}

std::int64_t run_count(const std::string& db) {
  history_store store(open_database(db));
  return store.db().query("SELECT COUNT(*) FROM tb_runs")[0].integer(0);
}

}  // namespace

HISTORY_TEST("a step is found at its commit and the driver change across it is named", step_at_commit) {
  const fs::path dir = scratch("history-step-reports");
  add_series(db, dir, 45, driver_step);
  const json out = show_json(db);
  REQUIRE(out["series"].size() == 1);
  const json& s = out["series"][0];
  CHECK(s["machine_class"] == "gpu: NVIDIA H100 80GB HBM3 x 1");
  CHECK(s["runs"].size() == 45);
  REQUIRE(s["change_points"].size() == 1);
  const json& c = s["change_points"][0];
  CHECK(c["commit"] == commit_of(30));
  CHECK(c["commit_before"] == commit_of(29));
  CHECK(c["change_pct"].get<double>() == Approx(-6).margin(0.3));
  CHECK(c["p_value"].get<double>() < 0.001);
  CHECK(c["environment_changes"] == json::array({"driver 570.86 -> 575.51"}));
  CHECK(s["runs"][30]["environment_changes"] == json::array({"driver 570.86 -> 575.51"}));
  CHECK(s["runs"][29]["environment"]["driver"] == "570.86");
  CHECK(s["latest_change"]["commit"] == commit_of(30));
}

HISTORY_TEST("adding the same reports again adds nothing, and each window keeps its process", idempotent_add) {
  const fs::path dir = scratch("history-idem-reports");
  fake_run r;
  r.rates = {100, 101, 99, 120, 121, 119};
  r.processes = {0, 0, 0, 1, 1, 1};
  const auto file = write_report(dir, "two-processes", r).string();
  fake_run old;  // a report of today: no process field
  old.name = "other";
  old.hash = "cccc3333dddd4444";
  const auto old_file = write_report(dir, "one-process", old).string();
  const std::string args = "history add --db '" + db + "' --commit c1 --branch main '" + file + "' '" + old_file + "'";
  REQUIRE(run_cli(args).code == 0);
  REQUIRE(run_cli(args).code == 0);
  CHECK(run_count(db) == 2);
  history_store store(open_database(db));
  const auto runs = run_from_report(read_text_file(file), file, {"c1", "main", ""});
  const auto windows = store.windows_of(runs.id);
  REQUIRE(windows.size() == 6);
  CHECK(windows[0].process == 0);
  CHECK(windows[5].process == 1);
  CHECK(store.report_of(runs.id) == read_text_file(file));
  const auto views = load_views(store, {"resnet-tiny"}, "", e_divisive_params{});
  REQUIRE(views.size() == 1);
  CHECK(views[0].runs[0].process_count == 2);
  // Two processes (medians 100 and 120): the median's own sd is their sd (14.14) over sqrt(2).
  CHECK(views[0].runs[0].median_sd == Approx(10));
}

HISTORY_TEST("a failed or interrupted run is kept with its status and left out of change points", failed_runs) {
  const fs::path dir = scratch("history-failed-reports");
  add_series(db, dir, 12, [](int i) {
    fake_run r;
    r.date = time_of(i);
    if (i == 5) r.status = "error";
    if (i == 7) {
      r.status = "interrupted";
      r.rates = {1000};
    }
    if (i == 9) {
      r.status = "error";
      r.rates.clear();  // crashed before its first window
    }
    return r;
  });
  const json s = show_json(db)["series"][0];
  REQUIRE(s["runs"].size() == 12);
  CHECK(s["runs"][5]["status"] == "error");
  CHECK(s["runs"][5]["counts"] == false);
  CHECK(s["runs"][7]["status"] == "interrupted");
  CHECK(s["runs"][9]["median"].is_null());
  CHECK(s["runs"][4]["counts"] == true);
}

HISTORY_TEST("a report of an unknown schema version stops the add with exit 2, nothing added", unknown_schema) {
  const fs::path dir = scratch("history-schema-reports");
  write_report(dir, "a-good", fake_run{});
  fake_run future;
  future.schema_version = 7;
  future.hash = "ffff";
  write_report(dir, "b-future", future);
  const auto r = run_cli("history add --db '" + db + "' --commit c1 --branch main '" + dir.string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("b-future.json") != std::string::npos);
  CHECK(run_count(db) == 0);
}

HISTORY_TEST("a database written by a newer trainbench is refused with exit 2 and left as it was", newer_schema) {
  const fs::path dir = scratch("history-newer-reports");
  const auto file = write_report(dir, "run", fake_run{}).string();
  REQUIRE(run_cli("history add --db '" + db + "' --commit c1 --branch main '" + file + "'").code == 0);
  {
    auto raw = open_database(db);
    raw->query("UPDATE tb_meta SET value = '99' WHERE key = 'schema_version'");
  }
  fake_run other;
  other.hash = "eeee";
  const auto file2 = write_report(dir, "run2", other).string();
  const auto r = run_cli("history add --db '" + db + "' --commit c2 --branch main '" + file2 + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("newer trainbench") != std::string::npos);
  CHECK(run_cli("history show --db '" + db + "'").code == 2);
  auto raw = open_database(db);
  CHECK(raw->query("SELECT COUNT(*) FROM tb_runs")[0].integer(0) == 1);
  CHECK(raw->query("SELECT value FROM tb_meta WHERE key = 'schema_version'")[0].text(0) == "99");
}

HISTORY_TEST("a database of the first schema is migrated and keeps its runs", migration) {
  {
    auto raw = open_database(db);
    migrate_to(*raw, 1);
    raw->query(
        "INSERT INTO tb_series (id, profile_hash, profile_name, machine_class) VALUES ('s1', 'h', 'old', 'cpu')");
  }
  history_store store(open_database(db));
  CHECK(store.schema_version() == history_schema_version);
  CHECK(store.all_series().size() == 1);
}

HISTORY_TEST("two jobs that add at once both land", concurrent_adds) {
  const fs::path a = scratch("history-concurrent-a"), b = scratch("history-concurrent-b");
  for (int i = 0; i < 20; ++i) {
    fake_run r;
    r.hash = "a" + std::to_string(i);
    write_report(a, "r" + std::to_string(i), r);
    r.hash = "b" + std::to_string(i);
    write_report(b, "r" + std::to_string(i), r);
  }
  const std::string add = "\"$TB\" history add -q --db '" + db + "' --branch main ";
  const auto r = run_shell(add + "--commit ca '" + a.string() + "' & " + add + "--commit cb '" + b.string() +
                           "' & wait %1; s1=$?; wait %2; s2=$?; echo \"exits $s1 $s2\"");
  INFO(r.output);
  CHECK(r.output.find("exits 0 0") != std::string::npos);
  CHECK(run_count(db) == 40);
}

HISTORY_TEST("show --out writes a self-contained index.html and a chart per series", show_out) {
  const fs::path dir = scratch("history-show-reports"), out = scratch("history-show-out");
  add_series(db, dir, 45, driver_step);
  const auto r = run_cli("history show --db '" + db + "' --out '" + out.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("driver 570.86 -> 575.51") != std::string::npos);
  const std::string html = read_text_file(out / "index.html");
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("-6.0%") != std::string::npos);
  // Nothing to fetch: no scripts, stylesheets, images or fonts from elsewhere.
  for (const char* fetch : {"src=", "<link", "url(", "@import", "<script"})
    CHECK(html.find(fetch) == std::string::npos);
  const std::string id = show_json(db)["series"][0]["id"];
  CHECK(fs::exists(out / (id + ".svg")));
}

TEST_CASE("history: commit and branch come from the CI's variables when not given", "[history]") {
  const std::string db = sqlite_db("ci_variables");
  const fs::path dir = scratch("history-ci-reports");
  const auto file = write_report(dir, "run", fake_run{}).string();
  const auto r =
      run_shell("GITHUB_SHA=0123456789abcdef GITHUB_HEAD_REF= GITHUB_REF_NAME=feature-x \"$TB\" history add --db '" +
                db + "' '" + file + "'");
  REQUIRE(r.code == 0);
  const json s = show_json(db)["series"][0];
  CHECK(s["runs"][0]["commit"] == "0123456789abcdef");
  CHECK(s["runs"][0]["branch"] == "feature-x");
  CHECK(s["runs"][0]["time"] == "2026-11-01T10:00:00Z");
}

TEST_CASE("history: a corrupt database file is refused with exit 2 and left untouched", "[history]") {
  const fs::path dir = scratch("history-corrupt");
  const fs::path db = dir / "history.sqlite";
  std::string junk = "this is not a SQLite database, it is a report someone copied over it\n";
  for (int i = 0; i < 200; ++i) junk += "junk line " + std::to_string(i) + "\n";
  write_text(db, junk);
  const auto file = write_report(dir, "run", fake_run{}).string();
  const auto r = run_cli("history add --db '" + db.string() + "' --commit c --branch main '" + file + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find(db.string()) != std::string::npos);
  CHECK(read_text_file(db) == junk);
  CHECK(!fs::exists(dir / "history.sqlite-wal"));
  CHECK(run_cli("history show --db '" + db.string() + "'").code == 2);
}

TEST_CASE("history: a PostgreSQL server that is down is bad input, exit 2", "[history]") {
  // Nothing listens on port 1; connecting is refused at once.
  const auto r = run_cli("history show --db 'postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=5'");
  CHECK(r.code == 2);
  CHECK(r.output.find("secret") == std::string::npos);  // the password is never printed
}

TEST_CASE("history: a PostgreSQL server that refuses the login is bad input, exit 2", "[history][postgresql]") {
  const char* base = std::getenv("TRAINBENCH_TEST_POSTGRES_URL");
  if (!base || !*base) {
    std::cout << "trainbench_test_skipped: no PostgreSQL server (TRAINBENCH_TEST_POSTGRES_URL is unset)\n";
    return;
  }
  // The same server as another user, one that does not exist: the login is refused.
  const std::string url = base;
  const std::size_t start = url.find("://") + 3, at = url.find('@', start);
  const std::string refused = url.substr(0, start) + "no_such_trainbench_user@" +
                              (at == std::string::npos ? url.substr(start) : url.substr(at + 1));
  const auto r = run_cli("history show --db '" + refused + "'");
  INFO(refused << "\n" << r.output);
  CHECK(r.code == 2);
}

TEST_CASE("history: a real run's report goes in and comes out", "[history]") {
  const fs::path dir = scratch("history-real");
  const std::string profile = tiny_profile(dir);
  REQUIRE(run_cli("run -q -c '" + profile + "' --out '" + (dir / "r.json").string() + "'").code == 0);
  const std::string db = (dir / "h.sqlite").string();
  REQUIRE(
      run_cli("history add -q --db '" + db + "' --commit c1 --branch main '" + (dir / "r.json").string() + "'").code ==
      0);
  const json s = show_json(db)["series"][0];
  const json report = read_json(dir / "r.json");
  CHECK(s["profile_hash"] == report["profile"]["hash"]);
  CHECK(s["machine_class"].get<std::string>().rfind("cpu: ", 0) == 0);
  CHECK(s["runs"][0]["windows"] == report["results"]["repeats"].size());
  CHECK(s["runs"][0]["median"].get<double>() == Approx(report["results"]["samples_per_s"]["median"].get<double>()));
}

TEST_CASE("history: show of a database that does not exist is exit 2 and makes no file", "[history]") {
  const fs::path db = scratch("history-missing") / "typo.sqlite";
  CHECK(run_cli("history show --db '" + db.string() + "'").code == 2);
  CHECK(!fs::exists(db));
}

HISTORY_TEST("show reads one branch: by default the one with most runs, else --branch", branches) {
  const fs::path dir = scratch("history-branch-reports");
  add_series(db, dir, 6, [](int i) {
    fake_run r;
    r.date = time_of(i);
    return r;
  });
  add_series(
      db, dir, 2,
      [](int i) {
        fake_run r;
        r.rates = {900, 901, 899};
        r.date = time_of(10 + i);
        return r;
      },
      "feature-x");
  const json main_view = show_json(db)["series"][0];
  CHECK(main_view["branch"] == "main");
  CHECK(main_view["runs"].size() == 6);
  const json feature = show_json(db, "--branch feature-x")["series"][0];
  CHECK(feature["runs"].size() == 2);
  CHECK(feature["runs"][0]["median"] == 900.0);
  CHECK(show_json(db, "--series resnet-tiny")["series"].size() == 1);
  CHECK(run_cli("history show --db '" + db + "' --series no-such-profile").code == 2);
}

HISTORY_TEST("a series is its workload: a rename or a new description stays in it and shows as a profile change",
             workload_series) {
  const fs::path dir = scratch("history-workload-" + std::string(db.rfind("postgres", 0) == 0 ? "pg" : "sqlite"));
  add_series(db, dir, 6, [](int i) {
    fake_run r;
    r.date = time_of(i);
    r.workload = "resnet-tiny-work";
    if (i >= 3) {  // a pull request renamed the profile and edited its description: a new full hash
      r.name = "resnet-tiny-renamed";
      r.description = "edited";
      r.hash = "cccc3333dddd4444";
    }
    return r;
  });
  json out = show_json(db);
  REQUIRE(out["series"].size() == 1);
  const json& s = out["series"][0];
  CHECK(s["runs"].size() == 6);
  CHECK(s["profile_name"] == "resnet-tiny-renamed");
  CHECK(s["runs"][3]["environment_changes"] ==
        json::array({"profile resnet-tiny (aaaa1111bbbb2222) -> resnet-tiny-renamed (cccc3333dddd4444)"}));
  CHECK(s["runs"][3]["environment"]["profile"] == "cccc3333dddd4444");
  // The same profile measured by bench-data, and by two ranks: series of their own.
  add_series(db, dir / "data", 2, [](int i) {
    fake_run r;
    r.date = time_of(i);
    r.workload = "resnet-tiny-work";
    r.measurement = "bench-data";
    return r;
  });
  add_series(db, dir / "two", 2, [](int i) {
    fake_run r;
    r.date = time_of(i);
    r.workload = "resnet-tiny-work";
    r.gpu.clear();  // on a CPU, where the machine class does not count ranks
    r.world = 2;
    return r;
  });
  add_series(db, dir / "one", 2, [](int i) {
    fake_run r;
    r.date = time_of(i);
    r.workload = "resnet-tiny-work";
    r.gpu.clear();
    return r;
  });
  out = show_json(db);
  CHECK(out["series"].size() == 4);
  std::set<std::string> workloads;
  for (const auto& x : out["series"]) workloads.insert(x["workload"].get<std::string>());
  CHECK(workloads.size() == 3);  // run (on the GPU and on the CPU), bench-data, two ranks
}

HISTORY_TEST("a database of schema 2 is rekeyed by workload: a renamed profile's two series become one",
             migration_rekey) {
  {
    auto raw = open_database(db);
    migrate_to(*raw, 2);
    // Schema 2 keyed a series on the full profile hash: a rename made a second series.
    for (int i = 0; i < 4; ++i) {
      fake_run r;
      r.date = time_of(i);
      r.workload = "work";
      if (i >= 2) {
        r.name = "renamed";
        r.hash = "cccc3333dddd4444";
      }
      const std::string series = "old-" + r.hash;
      if (raw->query("SELECT id FROM tb_series WHERE id = ?", {series}).empty())
        raw->query("INSERT INTO tb_series (id, profile_hash, profile_name, machine_class) VALUES (?, ?, ?, ?)",
                   {series, r.hash, r.name, "gpu: NVIDIA H100 80GB HBM3 x 1"});
      const std::string id = "run" + std::to_string(i);
      raw->query(
          "INSERT INTO tb_runs (id, series_id, profile_name, commit_sha, branch, run_time, added_at, source, status, "
          "error_kind, median, q1, q3, median_sd, window_count, process_count, env_driver, env_cuda, env_cudnn, "
          "env_libtorch, env_trainbench, env_host, env_build_type, report) VALUES (?, ?, ?, ?, 'main', ?, ?, 'x', "
          "'ok', '', 1000, 999, 1001, 1, 5, 1, '570.86', '13.0', '9.19.0', '2.11.0', '0.1.0 (abc1234)', 'runner-1', "
          "'Release', ?)",
          {id, series, r.name, commit_of(i), time_of(i), time_of(i), make_report(r).dump()});
      raw->query(
          "INSERT INTO tb_change_point_sets (series_id, branch, algorithm, parameters, version, runs_fingerprint, "
          "computed_at) VALUES (?, 'main', 'a', ?, 1, 'f', 'now')",
          {series, id});
    }
  }
  history_store store(open_database(db));
  CHECK(store.schema_version() == history_schema_version);
  const auto series = store.all_series();
  REQUIRE(series.size() == 1);
  CHECK(series[0].profile_name == "renamed");
  CHECK(series[0].profile_hash == "cccc3333dddd4444");
  CHECK_FALSE(series[0].workload.empty());
  const auto runs = store.runs_of(series[0].id, "main");
  REQUIRE(runs.size() == 4);
  CHECK(runs[0].profile_hash == "aaaa1111bbbb2222");
  CHECK(runs[3].profile_hash == "cccc3333dddd4444");
  CHECK(store.db().query("SELECT COUNT(*) FROM tb_change_point_sets")[0].integer(0) == 0);
  CHECK(store.db().query("SELECT COUNT(*) FROM tb_series")[0].integer(0) == 1);
}
