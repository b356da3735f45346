// trainbench history gate on each backend: verdicts on constructed histories (an unchanged
// candidate passes, a 10% slower one fails), the baseline taken since the last change point,
// the fallback with too little history, no baseline, the markdown comment, and bad input.
#include <catch2/catch.hpp>
#include <cmath>

#include "helpers.hpp"
#include "history/history_fixtures.hpp"
#include "trainbench/history/database.hpp"
#include "trainbench/util/fs.hpp"

using namespace tbtest;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A baseline run of two processes of two windows each, at `level` with a deterministic scatter
// of about 0.4% between processes.
fake_run baseline_run(int i, double level) {
  fake_run r;
  const double a = ((i * 37) % 11 - 5) * 0.0008, b = ((i * 53 + 3) % 13 - 6) * 0.0007;
  r.rates = {level * (1 + a), level * (1 + a) + 1, level * (1 + b), level * (1 + b) - 1};
  r.processes = {0, 0, 1, 1};
  r.date = time_of(i);
  return r;
}

// The pull request's run: five processes of two windows each, at `level`.
fake_run candidate_run(double level) {
  fake_run r;
  r.rates.clear();
  int p = 0;
  for (double off : {-0.003, -0.001, 0.0, 0.001, 0.003}) {
    r.rates.push_back(level * (1 + off));
    r.rates.push_back(level * (1 + off) + 1);
    r.processes.push_back(p);
    r.processes.push_back(p++);
  }
  r.date = "2026-11-20T10:00:00Z";
  return r;
}

fake_run other_series(fake_run r) {
  r.name = "resnet-other";
  r.hash = "9999888877776666";
  return r;
}

struct gate_out {
  int code = 0;
  std::string output;
  json j;
};

gate_out gate(const std::string& db, const std::string& candidates, const std::string& extra = "") {
  const auto r = run_cli("history gate --db '" + db + "' --format json " + extra + " " + candidates);
  INFO(r.output);
  gate_out out{r.code, r.output, json()};
  const auto brace = r.output.find('{');
  if (brace != std::string::npos) out.j = json::parse(r.output.substr(brace));
  return out;
}

// A scratch folder per test and backend: the two backends' cases may run at once.
std::string backend_dir(const std::string& name, const std::string& db) {
  return name + (db.rfind("postgres", 0) == 0 ? "-pg" : "-sqlite");
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// 45 runs at 1000 samples/s, then 940 from run 30 on, when the driver changed too.
fake_run stepped(int i) {
  fake_run r = baseline_run(i, i < 30 ? 1000 : 940);
  r.driver = i < 30 ? "570.86" : "575.51";
  return r;
}

}  // namespace

HISTORY_TEST("gate: an unchanged candidate passes and a 10% slower one is SLOWER, Holm across series", gate_verdicts) {
  const fs::path dir = scratch(backend_dir("gate-verdicts", db));
  add_series(db, dir, 20, [](int i) { return baseline_run(i, 1000); });
  add_series(db, dir / "other", 20, [](int i) { return other_series(baseline_run(i, 2000)); });
  const fs::path same = dir / "cand-same", slow = dir / "cand-slow";
  write_report(same, "a", candidate_run(1000));
  write_report(same, "b", other_series(candidate_run(2000)));
  write_report(slow, "a", candidate_run(900));
  write_report(slow, "b", other_series(candidate_run(2000)));

  const auto pass = gate(db, quoted(same));
  INFO(pass.output);
  CHECK(pass.code == 0);
  REQUIRE(pass.j["series"].size() == 2);
  for (const auto& s : pass.j["series"]) {
    CHECK(s["rule"] == "test");
    CHECK(s["verdict"] == "SAME");
    CHECK(s["baseline"]["runs"] == 20);
    CHECK(s["baseline"]["processes"] == 40);
    CHECK(s["baseline"]["change_point_commit"].is_null());
    CHECK(s["candidate"]["processes"] == 5);
  }
  CHECK(pass.j["family_size"] == 2);

  const auto fail = gate(db, quoted(slow));
  INFO(fail.output);
  CHECK(fail.code == 1);
  REQUIRE(fail.j["series"].size() == 2);
  const json& a = fail.j["series"][0];
  CHECK(a["profile_name"] == "resnet-tiny");
  CHECK(a["verdict"] == "SLOWER");
  CHECK(a["ratio"].get<double>() == Approx(0.9).margin(0.005));
  CHECK(a["interval"]["high"].get<double>() < 0.97);
  // Holm over the two series: the smaller p is doubled.
  CHECK(a["p_adjusted"].get<double>() == Approx(2 * a["p"].get<double>()));
  CHECK(fail.j["series"][1]["verdict"] == "SAME");
  CHECK(fail.j["summary"].get<std::string>().rfind("FAIL", 0) == 0);
}

HISTORY_TEST("gate: a candidate whose profile was renamed or described anew is still gated against its series",
             gate_renamed) {
  const fs::path dir = scratch(backend_dir("gate-renamed", db));
  add_series(db, dir, 20, [](int i) { return baseline_run(i, 1000); });
  fake_run slow = candidate_run(850);  // 15% slower, and the pull request edited the profile's text
  slow.name = "resnet-tiny-v2";
  slow.description = "now with a description";
  slow.hash = "eeee5555ffff6666";
  slow.workload = fake_run{}.hash;  // the same workload as the baseline's runs
  write_report(dir / "cand", "c", slow);
  const auto out = gate(db, quoted(dir / "cand"));
  INFO(out.output);
  CHECK(out.code == 1);
  REQUIRE(out.j["series"].size() == 1);
  const json& s = out.j["series"][0];
  CHECK(s["verdict"] == "SLOWER");
  CHECK(s["baseline"]["runs"] == 20);
  CHECK(s["environment_changes"] ==
        json::array({"profile resnet-tiny (aaaa1111bbbb2222) -> resnet-tiny-v2 (eeee5555ffff6666)"}));
}

// 40 runs of main whose level moves by about 1% from run to run (a deterministic scatter within
// +-1.5%, sd 0.95%), of 2 processes x 2 windows; the last one `fluke` times 1% away.
fake_run noisy_run(int i, double fluke) {
  const double level = 1000 * (1 + (i == 39 ? fluke * 0.01 : ((i * 37) % 11 - 5) * 0.003));
  const double a = ((i * 53 + 3) % 13 - 6) * 0.0003;
  fake_run r;
  r.rates = {level * (1 + a), level * (1 + a) + 1, level * (1 - a), level * (1 - a) - 1};
  r.processes = {0, 0, 1, 1};
  r.date = time_of(i);
  return r;
}

HISTORY_TEST("gate: a fluke run last on main does not decide the gate, and show marks it as an outlier", gate_fluke) {
  for (double fluke : {5.0, -5.0}) {
    const std::string tag = fluke > 0 ? "fast" : "slow";
    const std::string series_db = db.rfind("postgres", 0) == 0 ? db : db + "-" + tag;
    const fs::path dir = scratch(backend_dir("gate-fluke-" + tag, db));
    if (db.rfind("postgres", 0) == 0)  // one schema per test: the second series under another name
      add_series(series_db, dir, 40, [&](int i) {
        fake_run r = noisy_run(i, fluke);
        if (fluke < 0) r = other_series(r);
        return r;
      });
    else
      add_series(series_db, dir, 40, [&](int i) { return noisy_run(i, fluke); });
    fake_run same = candidate_run(1000), slow = candidate_run(880);
    if (fluke < 0 && db.rfind("postgres", 0) == 0) {
      same = other_series(same);
      slow = other_series(slow);
    }
    write_report(dir / "same", "c", same);
    write_report(dir / "slow", "c", slow);
    const auto out = gate(series_db, quoted(dir / "same"));
    INFO(tag << " fluke: " << out.output);
    CHECK(out.code == 0);
    const json& s = out.j["series"][0];
    CHECK(s["verdict"] != "SLOWER");
    CHECK(s["verdict"] != "FASTER");
    CHECK(s["baseline"]["change_point_commit"].is_null());  // one run is no level
    CHECK(s["baseline"]["runs"] == 39);                      // and the outlier is left out
    CHECK(s["notes"].dump().find("1 outlier run") != std::string::npos);
    const auto caught = gate(series_db, quoted(dir / "slow"));
    INFO(caught.output);
    CHECK(caught.code == 1);
    CHECK(caught.j["series"][0]["verdict"] == "SLOWER");
    // history show marks it.
    const auto shown = run_cli("history show --db '" + series_db + "' --format json --series " +
                               s["id"].get<std::string>());
    const json runs = json::parse(shown.output.substr(shown.output.find('{')))["series"][0]["runs"];
    REQUIRE(runs.size() == 40);
    CHECK(runs[39]["outlier"] == true);
    CHECK(runs[38]["outlier"] == false);
    const auto text = run_cli("history show --db '" + series_db + "' --series " + s["id"].get<std::string>());
    CHECK(text.output.find("outlier") != std::string::npos);
  }
}

HISTORY_TEST("gate: the baseline is the runs since the last change point", gate_since_change_point) {
  const fs::path dir = scratch(backend_dir("gate-step", db));
  add_series(db, dir, 45, stepped);
  fake_run at_new_level = candidate_run(940);
  at_new_level.driver = "575.51";
  write_report(dir / "new-level", "c", at_new_level);
  fake_run at_old_level = candidate_run(1000);
  at_old_level.driver = "580.00";
  write_report(dir / "old-level", "c", at_old_level);

  // At the level after the step: the same (against all 45 runs it would be 6% slower).
  const auto same = gate(db, quoted(dir / "new-level"));
  INFO(same.output);
  CHECK(same.code == 0);
  const json& s = same.j["series"][0];
  CHECK(s["verdict"] == "SAME");
  CHECK(s["baseline"]["change_point_commit"] == commit_of(30));
  CHECK(s["baseline"]["first_commit"] == commit_of(30));
  CHECK(s["baseline"]["last_commit"] == commit_of(44));
  CHECK(s["baseline"]["runs"] == 15);
  CHECK(s["baseline"]["median"].get<double>() == Approx(940).margin(5));
  CHECK(s["environment_changes"].empty());

  // At the level before it: FASTER than the baseline, and the driver change is named.
  const auto faster = gate(db, quoted(dir / "old-level"));
  INFO(faster.output);
  CHECK(faster.code == 0);
  CHECK(faster.j["series"][0]["verdict"] == "FASTER");
  CHECK(faster.j["series"][0]["environment_changes"] == json::array({"driver 575.51 -> 580.00"}));
  const auto text = run_cli("history gate --db '" + db + "' " + quoted(dir / "old-level"));
  CHECK(text.output.find("environment changed: driver 575.51 -> 580.00") != std::string::npos);

  // --baseline-runs keeps the latest runs since the change point.
  const auto capped = gate(db, quoted(dir / "new-level"), "--baseline-runs 10");
  CHECK(capped.j["series"][0]["baseline"]["runs"] == 10);
  CHECK(capped.j["series"][0]["baseline"]["first_commit"] == commit_of(35));
  CHECK(capped.j["series"][0]["baseline"]["runs_since_change_point"] == 15);
}

HISTORY_TEST("gate: too little history falls back to the threshold rule and says so", gate_too_little_history) {
  const fs::path dir = scratch(backend_dir("gate-little", db));
  add_series(db, dir, 2, [](int i) {
    fake_run r;  // one process each: two baseline processes in all
    r.date = time_of(i);
    return r;
  });
  write_report(dir / "slow", "c", candidate_run(900));
  write_report(dir / "same", "c", candidate_run(1000));
  const auto slow = gate(db, quoted(dir / "slow"));
  INFO(slow.output);
  CHECK(slow.code == 1);
  const json& s = slow.j["series"][0];
  CHECK(s["rule"] == "threshold");
  CHECK(s["verdict"] == "SLOWER");
  CHECK(s["p"].is_null());
  REQUIRE(s["notes"].size() == 1);
  CHECK(s["notes"][0].get<std::string>().find("too little history: 2 baseline runs") != std::string::npos);
  CHECK(slow.j["family_size"] == 0);
  const auto same = run_cli("history gate --db '" + db + "' " + quoted(dir / "same"));
  INFO(same.output);
  CHECK(same.code == 0);
  CHECK(same.output.find("too little history") != std::string::npos);
  CHECK(same.output.find("threshold rule") != std::string::npos);
}

HISTORY_TEST("gate: a series without baseline is reported, and --require-baseline fails it", gate_no_baseline) {
  const fs::path dir = scratch(backend_dir("gate-nobase", db));
  add_series(db, dir, 10, [](int i) { return baseline_run(i, 1000); });
  add_series(db, dir / "feature", 10, [](int i) { return other_series(baseline_run(i, 2000)); }, "feature-x");
  write_report(dir / "cand", "a", candidate_run(1000));
  write_report(dir / "cand", "b", other_series(candidate_run(2000)));  // runs only on another branch
  const auto out = gate(db, quoted(dir / "cand"));
  INFO(out.output);
  CHECK(out.code == 0);
  REQUIRE(out.j["series"].size() == 2);
  CHECK(out.j["series"][0]["verdict"] == "SAME");
  CHECK(out.j["series"][1]["verdict"] == "NO BASELINE");
  CHECK(out.j["series"][1]["rule"] == "none");
  CHECK(out.j["summary"].get<std::string>().find("1 NO BASELINE") != std::string::npos);
  CHECK(gate(db, quoted(dir / "cand"), "--require-baseline").code == 1);
  const auto text = run_cli("history gate --db '" + db + "' " + quoted(dir / "cand"));
  CHECK(text.output.find("no baseline: no run of this series on branch main") != std::string::npos);
}

HISTORY_TEST("gate --format markdown is a pull-request comment with a table and a summary", gate_markdown) {
  const fs::path dir = scratch(backend_dir("gate-md", db));
  add_series(db, dir, 12, [](int i) { return baseline_run(i, 1000); });
  write_report(dir / "cand", "a", candidate_run(900));
  const auto r = run_cli("history gate --db '" + db + "' --format markdown " + quoted(dir / "cand"));
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("**trainbench history gate: FAIL: 1 series against main (1 SLOWER)**") != std::string::npos);
  CHECK(r.output.find("| series | baseline runs (commits) | candidate | ratio [95% CI] | verdict |\n|---|") !=
        std::string::npos);
  CHECK(r.output.find("| resnet-tiny <br>`gpu: NVIDIA H100 80GB HBM3 x 1` | 12 runs, 24 processes, " +
                      commit_of(0).substr(0, 12) + "..." + commit_of(11).substr(0, 12)) != std::string::npos);
  CHECK(r.output.find("| **SLOWER** (") != std::string::npos);
}

HISTORY_TEST("gate: bad input is exit 2 naming what is wrong", gate_bad_input) {
  const fs::path dir = scratch(backend_dir("gate-bad", db));
  add_series(db, dir, 3, [](int i) { return baseline_run(i, 1000); });
  const auto cand = write_report(dir / "cand", "c", candidate_run(1000));
  fake_run future = candidate_run(1000);
  future.schema_version = 7;
  const auto bad = write_report(dir / "future", "f", future);
  auto r = run_cli("history gate --db '" + db + "' " + quoted(bad));
  CHECK(r.code == 2);
  CHECK(r.output.find(bad.string()) != std::string::npos);
  r = run_cli("history gate --db '" + db + "' " + quoted(dir / "no-such-report.json"));
  CHECK(r.code == 2);
  CHECK(r.output.find("no-such-report.json") != std::string::npos);
  r = run_cli("history gate --db '" + db + "' --branch mian " + quoted(cand));
  CHECK(r.code == 2);
  CHECK(r.output.find("--branch 'mian'") != std::string::npos);
  CHECK(r.output.find("branches: main") != std::string::npos);
}

TEST_CASE("history gate: a database that does not exist is exit 2 and makes no file", "[history]") {
  const fs::path dir = scratch("gate-missing-db");
  const fs::path db = dir / "typo.sqlite";
  const auto cand = write_report(dir, "c", candidate_run(1000));
  const auto r = run_cli("history gate --db '" + db.string() + "' '" + cand.string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find(db.string()) != std::string::npos);
  CHECK(!fs::exists(db));
}

HISTORY_TEST("gate: a candidate that measured no window fails the gate, exit 1", gate_crashed_candidate) {
  const fs::path dir = scratch(backend_dir("gate-crashed", db));
  add_series(db, dir, 6, [](int i) { return baseline_run(i, 1000); });
  fake_run crashed;
  crashed.status = "error";
  crashed.rates.clear();  // crashed before its first window
  write_report(dir / "cand", "c", crashed);
  const auto out = gate(db, quoted(dir / "cand"));
  INFO(out.output);
  CHECK(out.code == 1);
  CHECK(out.j["series"][0]["verdict"] == "NO WINDOWS");
  CHECK(out.j["series"][0]["notes"][0].get<std::string>().find("ended with status 'error' after 0 windows") !=
        std::string::npos);
}

HISTORY_TEST("gate: a database written by a newer trainbench is exit 2 and left as it was", gate_newer_db) {
  const fs::path dir = scratch(backend_dir("gate-newer", db));
  add_series(db, dir, 3, [](int i) { return baseline_run(i, 1000); });
  trainbench::open_database(db)->query("UPDATE tb_meta SET value = '99' WHERE key = 'schema_version'");
  const auto cand = write_report(dir / "cand", "c", candidate_run(1000));
  const auto r = run_cli("history gate --db '" + db + "' " + quoted(cand));
  CHECK(r.code == 2);
  CHECK(r.output.find("newer trainbench") != std::string::npos);
  CHECK(trainbench::open_database(db)->query("SELECT value FROM tb_meta WHERE key = 'schema_version'")[0].text(0) ==
        "99");
}

TEST_CASE("history gate: a damaged database file or a PostgreSQL server that is down is exit 2", "[history]") {
  const fs::path dir = scratch("gate-damaged");
  const fs::path db = dir / "history.sqlite";
  std::string junk = "not a SQLite database\n";
  for (int i = 0; i < 200; ++i) junk += "junk line " + std::to_string(i) + "\n";
  write_text(db, junk);
  const auto cand = write_report(dir / "cand", "c", candidate_run(1000));
  auto r = run_cli("history gate --db '" + db.string() + "' " + quoted(cand));
  CHECK(r.code == 2);
  CHECK(r.output.find(db.string()) != std::string::npos);
  CHECK(trainbench::read_text_file(db) == junk);
  // Nothing listens on port 1; connecting is refused at once.
  r = run_cli("history gate --db 'postgresql://nobody:secret@127.0.0.1:1/none?connect_timeout=5' " + quoted(cand));
  CHECK(r.code == 2);
  CHECK(r.output.find("secret") == std::string::npos);
}
