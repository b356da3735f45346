// history's edges that protect the machine and the reader: parameters bounded, a database's
// series ids validated before they name files, the pull-request comment escaped and without
// the database's address.
#include <catch2/catch.hpp>
#include <iostream>

#include "helpers.hpp"
#include "history/history_fixtures.hpp"
#include "trainbench/history/database.hpp"
#include "trainbench/history/gate.hpp"
#include "trainbench/history/history.hpp"
#include "trainbench/report/compare.hpp"

using namespace trainbench;
using namespace tbtest;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fake_run level_run(int i, double level, const std::string& name = "resnet-tiny") {
  fake_run r;
  r.name = name;
  const double a = ((i * 37) % 11 - 5) * 0.0008, b = ((i * 53 + 3) % 13 - 6) * 0.0007;
  r.rates = {level * (1 + a), level * (1 + a) + 1, level * (1 + b), level * (1 + b) - 1};
  r.processes = {0, 0, 1, 1};
  r.date = time_of(i);
  return r;
}

std::string shell_word(const fs::path& p) { return "'" + p.string() + "'"; }

}  // namespace

TEST_CASE("history: --window beyond 1000 runs is bad input, exit 2, for add, show and gate", "[history]") {
  const fs::path dir = scratch("history-window-bound");
  const std::string db = (dir / "h.sqlite").string();
  const fs::path report = write_report(dir, "r", level_run(0, 1000));
  const auto add = run_cli("history add -q --db " + shell_word(db) + " --commit c1 --branch main --window 50000 " +
                           shell_word(report));
  CHECK(add.code == 2);
  CHECK(add.output.find("--window 50000: at most 1000 runs") != std::string::npos);
  CHECK_FALSE(fs::exists(db));  // refused before the database is made
  REQUIRE(run_cli("history add -q --db " + shell_word(db) + " --commit c1 --branch main " + shell_word(report)).code == 0);
  const auto show = run_cli("history show --db " + shell_word(db) + " --window 1001");
  CHECK(show.code == 2);
  CHECK(show.output.find("--window 1001: at most 1000 runs") != std::string::npos);
  CHECK(run_cli("history show --db " + shell_word(db) + " --window 1000").code == 0);
  const auto gate = run_cli("history gate --db " + shell_word(db) + " --window 50000 " + shell_word(report));
  CHECK(gate.code == 2);
  CHECK(gate.output.find("at most 1000 runs") != std::string::npos);
}

TEST_CASE("history: a series id that is not trainbench's is refused on read, never a file name", "[history]") {
  CHECK(valid_series_id("0123456789abcdef"));
  CHECK(valid_series_id("run-world2_x"));
  CHECK_FALSE(valid_series_id(""));
  CHECK_FALSE(valid_series_id(std::string(65, 'a')));
  CHECK_FALSE(valid_series_id("../../evil"));
  CHECK_FALSE(valid_series_id("x'><script>alert(1)</script>"));

  const fs::path dir = scratch("history-hostile-id");
  const std::string db = (dir / "h.sqlite").string();
  add_series(db, dir / "reports", 3, [](int i) { return level_run(i, 1000); });
  const std::string hostile = "../../escaped'><script>alert(1)</script>";
  {
    auto d = open_database(db, false);
    d->query("PRAGMA foreign_keys = OFF");
    d->query("UPDATE tb_runs SET series_id = ?", {hostile});
    d->query("UPDATE tb_series SET id = ?", {hostile});
  }
  const fs::path out = dir / "site" / "a" / "b";
  const auto r = run_cli("history show --db " + shell_word(db) + " --out " + shell_word(out));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("not one trainbench writes") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "index.html"));
  CHECK_FALSE(fs::exists(dir / "site" / "escaped'><script>alert(1)<"));
  CHECK_FALSE(fs::exists(dir / "site" / "escaped'><script>alert(1)</script>.svg"));
}

TEST_CASE("history: the index page escapes every attribute it writes", "[history]") {
  series_view v;
  v.series = {"id'><b>x</b>", "hash", "name<i>", "cpu: 'host'", "workload<s>"};
  v.branch = "main";
  const std::string html = history_index_html({v}, "db'<u>");
  CHECK(html.find("<b>x</b>") == std::string::npos);
  CHECK(html.find("<i>") == std::string::npos);
  CHECK(html.find("<u>") == std::string::npos);
  CHECK(html.find("href='#sid&#39;&gt;&lt;b&gt;x&lt;/b&gt;'") != std::string::npos);
}

TEST_CASE("gate markdown: text from files renders as itself, the database as its name alone", "[history]") {
  CHECK(markdown_text("<img src=x onerror=alert(1)>") == "\\<img src=x onerror=alert(1)\\>");
  CHECK(markdown_text("**b** _i_ [l](http://x) ![i](y) `c` a|b ~s~ @team #12 $x$ &amp;") ==
        "\\*\\*b\\*\\* \\_i\\_ \\[l\\](http://x) \\!\\[i\\](y) \\`c\\` a\\|b \\~s\\~ \\@team \\#12 \\$x\\$ \\&amp;");
  CHECK(markdown_text("two\nlines\r") == "two lines ");
  CHECK(markdown_text("a\\b") == "a\\\\b");
  CHECK(markdown_code("gpu: `x` | y\nz") == "`gpu: 'x' \\| y z`");
  CHECK(public_where("postgresql://alice:s3cret@db.internal.example:5432/bench?sslmode=require&password=p") ==
        "PostgreSQL database bench");
  CHECK(public_where("postgres://db.internal.example/") == "a PostgreSQL database");
  CHECK(public_where("postgresql://postgres@/postgres?host=/var/run/pg&port=5433") == "PostgreSQL database postgres");
  CHECK(public_where("/home/ci/secret-folder/history.sqlite") == "history.sqlite");

  const fs::path dir = scratch("history-gate-md-escape");
  const std::string db = (dir / "private-folder" / "h.sqlite").string();
  const std::string name = "x<script>alert(1)</script> **bold** [l](http://e) @team";
  add_series(db, dir / "base", 12, [&](int i) { return level_run(i, 1000, name); });
  fake_run cand = level_run(20, 900, name);
  cand.driver = "575.51<img src=x>";
  write_report(dir / "cand", "a", cand);
  const auto r = run_cli("history gate --db " + shell_word(db) + " --format markdown " + shell_word(dir / "cand"));
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("<script>") == std::string::npos);
  CHECK(r.output.find("**bold**") == std::string::npos);
  CHECK(r.output.find("[l](") == std::string::npos);
  CHECK(r.output.find(" @team") == std::string::npos);
  CHECK(r.output.find("x\\<script\\>alert(1)\\</script\\> \\*\\*bold\\*\\*") != std::string::npos);
  CHECK(r.output.find("`driver 570.86 -> 575.51<img src=x>`") != std::string::npos);  // inside a code span
  CHECK(r.output.find("private-folder") == std::string::npos);
  CHECK(r.output.find(" in h.sqlite: run level") != std::string::npos);
  CHECK(r.output.find("**SLOWER**") != std::string::npos);
}

TEST_CASE("gate markdown on PostgreSQL names the database, not its host, user or password",
          "[history][postgresql]") {
  const auto db = postgres_db("gate_md_where");
  if (!db) return;
  const fs::path dir = scratch("history-gate-md-pg");
  add_series(*db, dir / "base", 6, [](int i) { return level_run(i, 1000); });
  write_report(dir / "cand", "a", level_run(20, 1000));
  const auto r = run_cli("history gate --db '" + *db + "' --format markdown " + shell_word(dir / "cand"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find(" in PostgreSQL database ") != std::string::npos);
  CHECK(r.output.find("postgresql://") == std::string::npos);
  CHECK(r.output.find("host=") == std::string::npos);
  CHECK(r.output.find("search_path") == std::string::npos);
}

TEST_CASE("history: PostgreSQL connects with a bounded wait unless the URL sets one", "[history]") {
  CHECK(with_connect_timeout("postgresql://u@h/db") == "postgresql://u@h/db?connect_timeout=30");
  CHECK(with_connect_timeout("postgresql://u@/db?host=/run/pg") == "postgresql://u@/db?host=/run/pg&connect_timeout=30");
  CHECK(with_connect_timeout("postgres://h/db?connect_timeout=5") == "postgres://h/db?connect_timeout=5");
}

TEST_CASE("history: a PostgreSQL writer waits a bounded time for another's lock, then fails naming it",
          "[history][postgresql]") {
  const auto db = postgres_db("lock_wait");
  if (!db) return;
  const fs::path dir = scratch("history-pg-lock-wait");
  const fs::path report = write_report(dir, "r", level_run(0, 1000));
  REQUIRE(run_cli("history add -q --db '" + *db + "' --commit c0 --branch main " + shell_word(report)).code == 0);
  const fs::path second = write_report(dir, "s", level_run(1, 1000));
  const std::string add = "history add -q --db '" + *db + "' --commit c1 --branch main " + shell_word(second);
  {
    auto holder = open_database(*db);
    holder->begin_write();  // another writer, stuck inside its transaction
    const auto r = run_shell("TRAINBENCH_TEST_HISTORY_LOCK_MS=300 \"$TB\" " + add);
    INFO(r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("still locked by another writer after 0.3 s") != std::string::npos);
    holder->rollback();
  }
  const auto after = run_shell("TRAINBENCH_TEST_HISTORY_LOCK_MS=300 \"$TB\" " + add);
  INFO(after.output);
  CHECK(after.code == 0);
}

// Permissions hold in the child (run_shell_with_permissions), so the file and folder modes below
// bind as root too.
TEST_CASE("history: show and gate read a read-only SQLite copy, change points kept in memory", "[history]") {
  const fs::path dir = scratch("history-read-only-sqlite");
  const fs::path folder = dir / "ro";
  const std::string db = (folder / "h.sqlite").string();
  add_series(db, dir / "base", 8, [](int i) { return level_run(i, 1000); });
  write_report(dir / "cand", "a", level_run(20, 1000));
  fs::permissions(db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                              fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const auto before = fs::last_write_time(db);
  // --max-p other than add's: the stored change points do not fit, so show computes them anew.
  const auto show = run_shell_with_permissions("\"$TB\" history show --format json --max-p 0.01 --db " + shell_word(db));
  if (show.code == -1) {
    std::cout << "trainbench_test_skipped: this process cannot give up CAP_DAC_OVERRIDE\n";
    return;
  }
  INFO(show.output);
  CHECK(show.code == 0);
  CHECK(show.output.find("\"runs\"") != std::string::npos);
  const auto gate =
      run_shell_with_permissions("\"$TB\" history gate --max-p 0.01 --db " + shell_word(db) + " " + shell_word(dir / "cand"));
  INFO(gate.output);
  CHECK(gate.code == 0);
  CHECK(gate.output.find("gate: PASS") != std::string::npos);
  CHECK(fs::last_write_time(db) == before);
  CHECK(std::distance(fs::directory_iterator(folder), fs::directory_iterator{}) == 1);  // no -wal, no -shm
  fs::permissions(folder, fs::perms::owner_all, fs::perm_options::add);
}

TEST_CASE("history: show and gate run as a PostgreSQL role that may only SELECT", "[history][postgresql]") {
  const auto db = postgres_db("read_only_role");
  if (!db) return;
  const fs::path dir = scratch("history-read-only-role");
  add_series(*db, dir / "base", 8, [](int i) { return level_run(i, 1000); });
  write_report(dir / "cand", "a", level_run(20, 1000));
  {
    auto admin = open_database(*db);
    admin->query(
        "DO $$ BEGIN CREATE ROLE tb_test_reader LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$");
    admin->query("GRANT USAGE ON SCHEMA tb_test_read_only_role TO tb_test_reader");
    admin->query("GRANT SELECT ON ALL TABLES IN SCHEMA tb_test_read_only_role TO tb_test_reader");
  }
  const std::size_t start = db->find("://") + 3, at = db->find('@', start);
  const std::string reader = db->substr(0, start) + "tb_test_reader@" +
                             (at == std::string::npos ? db->substr(start) : db->substr(at + 1));
  const auto show = run_cli("history show --format json --max-p 0.01 --db '" + reader + "'");
  INFO(show.output);
  CHECK(show.code == 0);
  const auto gate = run_cli("history gate --max-p 0.01 --db '" + reader + "' " + shell_word(dir / "cand"));
  INFO(gate.output);
  CHECK(gate.code == 0);
  // The same role cannot add: the refusal is the server's, not a silent no-op.
  const auto add = run_cli("history add -q --db '" + reader + "' --commit c9 --branch main " +
                           shell_word(dir / "cand" / "a.json"));
  CHECK(add.code != 0);
}

namespace {

// A report of a two-rank job; ranks_in_results 1: the ranks could not be gathered.
fs::path write_dist_report(const fs::path& dir, const std::string& file, const fake_run& run, int ranks_in_results) {
  json j = make_report(run);
  j["results"]["distributed"] = {{"world_size", 2}, {"ranks_in_results", ranks_in_results}};
  const fs::path path = dir / (file + ".json");
  write_text(path, j.dump(1));
  return path;
}

}  // namespace

TEST_CASE("history: one rank's windows of a two-rank job are not judged against the job's", "[history]") {
  const fs::path dir = scratch("history-ranks-in-results");
  const std::string db = (dir / "h.sqlite").string();
  for (int i = 0; i < 12; ++i) {
    const fs::path r = write_dist_report(dir / "base", "b" + std::to_string(i), level_run(i, 2000), 2);
    REQUIRE(run_cli("history add -q --db " + shell_word(db) + " --branch main --commit " + commit_of(i) + " " + shell_word(r))
                .code == 0);
  }
  // A failed candidate: rank 0's windows alone, half the job's rate, and no slower per rank.
  fake_run failed = level_run(20, 1000);
  failed.status = "error";
  write_dist_report(dir / "cand", "a", failed, 1);
  const auto r = run_cli("history gate --format json --db " + shell_word(db) + " " + shell_word(dir / "cand"));
  INFO(r.output);
  const json g = json::parse(r.output.substr(r.output.find('{')));
  REQUIRE(g["series"].size() == 1);
  CHECK(g["series"][0]["baseline"]["runs"] == 12);
  CHECK(g["series"][0]["verdict"] == "NO WINDOWS");  // not SLOWER: nothing of the job was measured
  CHECK(g["series"][0]["notes"].dump().find("1 of its 2 ranks") != std::string::npos);
  CHECK(r.code == 1);

  // Such a run, even one that ended ok, never counts as a median of the series.
  const fs::path partial = write_dist_report(dir / "more", "p", level_run(30, 1000), 1);
  REQUIRE(run_cli("history add -q --db " + shell_word(db) + " --branch main --commit c30 " + shell_word(partial)).code == 0);
  const auto show = run_cli("history show --format json --db " + shell_word(db));
  REQUIRE(show.code == 0);
  const json runs = json::parse(show.output.substr(show.output.find('{')))["series"][0]["runs"];
  REQUIRE(runs.size() == 13);
  CHECK(runs.back()["median"].is_null());
  CHECK(runs.back()["windows"] == 4);
}

TEST_CASE("history: SQLite on a network file system is told apart by statfs's type", "[history]") {
  CHECK(network_file_system(0x6969) == std::optional<std::string>("NFS"));
  CHECK(network_file_system(0xFF534D42L) == std::optional<std::string>("CIFS"));
  CHECK(network_file_system(0xFE534D42L) == std::optional<std::string>("SMB2"));
  CHECK(network_file_system(0x517B) == std::optional<std::string>("SMB"));
  CHECK(network_file_system(0x65735546) == std::optional<std::string>("FUSE"));
  CHECK(network_file_system(static_cast<long>(static_cast<int>(0xFF534D42U))) ==
        std::optional<std::string>("CIFS"));  // as a 32-bit f_type, sign-extended
  CHECK_FALSE(network_file_system(0xEF53));      // ext4
  CHECK_FALSE(network_file_system(0x58465342));  // XFS
  CHECK_FALSE(network_file_system(0x01021994));  // tmpfs
  CHECK_FALSE(network_file_system(0x794C7630));  // overlayfs
}

TEST_CASE("one rule tells a run report from other JSON, for compare and history alike", "[history]") {
  CHECK(is_run_report(json{{"schema_version", 1}, {"results", json::object()}}));
  CHECK(is_run_report(json{{"results", json::object()}}));
  CHECK_FALSE(is_run_report(json{{"verdict", "input-bound"}}));  // bottleneck.json
  CHECK_FALSE(is_run_report(json::array()));
  CHECK_FALSE(is_run_report(json("text")));
}
