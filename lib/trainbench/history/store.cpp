#include "trainbench/history/store.hpp"

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "trainbench/history/import.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// Each step takes the schema from version i to i + 1; a new version appends a step and never
// edits an old one. SQL both SQLite and PostgreSQL run unchanged (see database.hpp).
const std::vector<std::vector<std::string>>& migrations() {
  static const std::vector<std::vector<std::string>> steps{
      {
          "CREATE TABLE tb_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
          "CREATE TABLE tb_series (id TEXT PRIMARY KEY, profile_hash TEXT NOT NULL, profile_name TEXT NOT NULL, "
          "machine_class TEXT NOT NULL)",
          "CREATE TABLE tb_runs (id TEXT PRIMARY KEY, series_id TEXT NOT NULL REFERENCES tb_series(id), "
          "profile_name TEXT NOT NULL, commit_sha TEXT NOT NULL, branch TEXT NOT NULL, run_time TEXT NOT NULL, "
          "added_at TEXT NOT NULL, source TEXT NOT NULL, status TEXT NOT NULL, error_kind TEXT NOT NULL, "
          "median DOUBLE PRECISION, q1 DOUBLE PRECISION, q3 DOUBLE PRECISION, median_sd DOUBLE PRECISION NOT NULL, "
          "window_count BIGINT NOT NULL, process_count BIGINT NOT NULL, env_driver TEXT NOT NULL, "
          "env_cuda TEXT NOT NULL, env_cudnn TEXT NOT NULL, env_libtorch TEXT NOT NULL, env_trainbench TEXT NOT NULL, "
          "env_host TEXT NOT NULL, env_build_type TEXT NOT NULL, report TEXT NOT NULL)",
          "CREATE TABLE tb_windows (run_id TEXT NOT NULL REFERENCES tb_runs(id), idx BIGINT NOT NULL, "
          "process BIGINT NOT NULL, samples BIGINT NOT NULL, elapsed_s DOUBLE PRECISION NOT NULL, "
          "samples_per_s DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, idx))",
          "CREATE TABLE tb_change_point_sets (series_id TEXT NOT NULL REFERENCES tb_series(id), branch TEXT NOT NULL, "
          "algorithm TEXT NOT NULL, parameters TEXT NOT NULL, version BIGINT NOT NULL, runs_fingerprint TEXT NOT NULL, "
          "computed_at TEXT NOT NULL, PRIMARY KEY (series_id, branch, algorithm, parameters))",
          "CREATE TABLE tb_change_points (series_id TEXT NOT NULL, branch TEXT NOT NULL, algorithm TEXT NOT NULL, "
          "parameters TEXT NOT NULL, run_id TEXT NOT NULL REFERENCES tb_runs(id), "
          "previous_run_id TEXT NOT NULL REFERENCES tb_runs(id), n_before BIGINT NOT NULL, n_after BIGINT NOT NULL, "
          "mean_before DOUBLE PRECISION NOT NULL, mean_after DOUBLE PRECISION NOT NULL, "
          "sd_before DOUBLE PRECISION NOT NULL, sd_after DOUBLE PRECISION NOT NULL, "
          "change_pct DOUBLE PRECISION NOT NULL, p_value DOUBLE PRECISION NOT NULL, qhat DOUBLE PRECISION NOT NULL, "
          "environment_changes TEXT NOT NULL, PRIMARY KEY (series_id, branch, algorithm, parameters, run_id))",
      },
      {
          // show and the gate read a series' runs on a branch in time order.
          "CREATE INDEX tb_runs_by_series ON tb_runs (series_id, branch, run_time)",
      },
      {
          // Series keyed on the workload (report/identity.hpp), no longer on the full profile hash,
          // which becomes a run attribute; rekey_series (below) moves the runs.
          "ALTER TABLE tb_runs ADD COLUMN profile_hash TEXT NOT NULL DEFAULT ''",
          "ALTER TABLE tb_series ADD COLUMN workload TEXT NOT NULL DEFAULT ''",
      },
  };
  return steps;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int stored_version(database& db) {
  if (!db.has_table("tb_meta")) return 0;
  const auto rows = db.query("SELECT value FROM tb_meta WHERE key = 'schema_version'");
  if (rows.empty()) return 0;
  return static_cast<int>(rows[0].integer(0));
}

// Version 3: every run moves to the series of its workload, read again from its stored report;
// series left without runs go, and so do the stored change points (recomputed when next read).
void rekey_series(database& db) {
  std::vector<std::string> ids;
  for (const auto& r : db.query("SELECT id FROM tb_runs ORDER BY run_time, id")) ids.push_back(r.text(0));
  std::map<std::string, std::string> latest_name, latest_hash;  // new series -> its latest run's
  std::set<std::string> created, emptied;
  constexpr std::size_t chunk = 100;  // reports in memory at once
  for (std::size_t from = 0; from < ids.size(); from += chunk) {
    std::string sql = "SELECT id, series_id, profile_name, report FROM tb_runs WHERE id IN (";
    std::vector<sql_value> params;
    for (std::size_t i = from; i < std::min(ids.size(), from + chunk); ++i) {
      sql += i == from ? "?" : ", ?";
      params.emplace_back(ids[i]);
    }
    for (const auto& r : db.query(sql + ")", params)) {
      const nlohmann::json report = nlohmann::json::parse(r.text(3), nullptr, false);
      if (report.is_discarded() || !report.is_object()) continue;  // stays where it was
      series_key key;
      try {
        key = series_key_of(report);
      } catch (const std::exception&) {
        continue;
      }
      if (!created.count(key.series_id) && db.query("SELECT id FROM tb_series WHERE id = ?", {key.series_id}).empty())
        db.query(
            "INSERT INTO tb_series (id, profile_hash, profile_name, machine_class, workload) VALUES (?, ?, ?, ?, ?)",
            {key.series_id, key.profile_hash, r.text(2), key.machine_class, key.workload});
      created.insert(key.series_id);
      if (r.text(1) != key.series_id) emptied.insert(r.text(1));
      latest_name[key.series_id] = r.text(2);
      latest_hash[key.series_id] = key.profile_hash;
      db.query("UPDATE tb_runs SET series_id = ?, profile_hash = ? WHERE id = ?",
               {key.series_id, key.profile_hash, r.text(0)});
    }
  }
  for (const auto& [id, name] : latest_name)
    db.query("UPDATE tb_series SET profile_name = ?, profile_hash = ? WHERE id = ?", {name, latest_hash[id], id});
  db.query("DELETE FROM tb_change_points");
  db.query("DELETE FROM tb_change_point_sets");
  for (const auto& id : emptied)
    if (db.query("SELECT id FROM tb_runs WHERE series_id = ?", {id}).empty())
      db.query("DELETE FROM tb_series WHERE id = ?", {id});
}

void apply_migrations(database& db, int from, int to) {
  for (int v = from; v < to; ++v) {
    for (const auto& sql : migrations().at(static_cast<std::size_t>(v))) db.query(sql);
    if (v + 1 == 3) rekey_series(db);
  }
  db.query("DELETE FROM tb_meta WHERE key = 'schema_version'");
  db.query("INSERT INTO tb_meta (key, value) VALUES ('schema_version', ?)", {std::to_string(to)});
}

const char* run_columns =
    "id, series_id, profile_name, commit_sha, branch, run_time, source, status, error_kind, median, q1, q3, "
    "median_sd, window_count, process_count, env_driver, env_cuda, env_cudnn, env_libtorch, env_trainbench, env_host, "
    "env_build_type, profile_hash";

run_record run_of(const sql_row& r) {
  run_record run;
  run.id = r.text(0);
  run.series_id = r.text(1);
  run.profile_name = r.text(2);
  run.commit = r.text(3);
  run.branch = r.text(4);
  run.time = r.text(5);
  run.source = r.text(6);
  run.status = r.text(7);
  run.error_kind = r.text(8);
  run.median = r.maybe_real(9);
  run.q1 = r.maybe_real(10);
  run.q3 = r.maybe_real(11);
  run.median_sd = r.real(12);
  run.window_count = r.integer(13);
  run.process_count = r.integer(14);
  for (std::size_t f = 0; f < environment_fields.size(); ++f) run.env[f] = r.text(15 + f);  // profile: profile_hash
  run.profile_hash = run.env[7];
  return run;
}

sql_value optional_value(const std::optional<double>& v) { return v ? sql_value(*v) : sql_value(nullptr); }

}  // namespace

void migrate_to(database& db, int version) {
  write_transaction tx(db);
  apply_migrations(db, stored_version(db), version);
  tx.commit();
}

history_store::history_store(std::unique_ptr<database> db) : db_(std::move(db)) { migrate(); }

int history_store::schema_version() { return stored_version(*db_); }

void history_store::migrate() {
  // Read first without a write lock: a current database (the usual case) needs none.
  int version = stored_version(*db_);
  if (version > history_schema_version)
    throw input_error("--db " + db_->where() + ": written by a newer trainbench (history schema " +
                      std::to_string(version) + "; this trainbench reads up to " +
                      std::to_string(history_schema_version) + "); upgrade trainbench, nothing was changed");
  if (version == history_schema_version) return;
  if (db_->read_only())
    throw input_error("--db " + db_->where() +
                      (version == 0 ? std::string(": holds no history yet")
                                    : ": history schema " + std::to_string(version) + ", this trainbench reads " +
                                          std::to_string(history_schema_version)) +
                      "; show and gate only read: a `history add` with write access " +
                      (version == 0 ? "creates it" : "migrates it") + ", nothing was changed");
  write_transaction tx(*db_);
  version = stored_version(*db_);  // another process may have migrated it meanwhile
  if (version < history_schema_version) apply_migrations(*db_, version, history_schema_version);
  tx.commit();
}

std::vector<std::string> history_store::add_runs(const std::vector<run_record>& runs) {
  std::vector<std::string> added;
  const std::string now = utc_now();
  for (const auto& run : runs) {
    if (!db_->query("SELECT id FROM tb_runs WHERE id = ?", {run.id}).empty()) continue;
    if (db_->query("SELECT id FROM tb_series WHERE id = ?", {run.series_id}).empty())
      db_->query(
          "INSERT INTO tb_series (id, profile_hash, profile_name, machine_class, workload) VALUES (?, ?, ?, ?, ?)",
          {run.series_id, run.profile_hash, run.profile_name, run.machine_class, run.workload});
    else
      db_->query("UPDATE tb_series SET profile_name = ?, profile_hash = ? WHERE id = ?",
                 {run.profile_name, run.profile_hash, run.series_id});
    std::vector<sql_value> v{run.id,
                             run.series_id,
                             run.profile_name,
                             run.commit,
                             run.branch,
                             run.time,
                             now,
                             run.source,
                             run.status,
                             run.error_kind,
                             optional_value(run.median),
                             optional_value(run.q1),
                             optional_value(run.q3),
                             run.median_sd,
                             run.window_count,
                             run.process_count};
    for (std::size_t f = 0; f + 1 < run.env.size(); ++f) v.emplace_back(run.env[f]);
    v.emplace_back(run.report);
    v.emplace_back(run.profile_hash);
    db_->query(
        "INSERT INTO tb_runs (id, series_id, profile_name, commit_sha, branch, run_time, added_at, source, status, "
        "error_kind, median, q1, q3, median_sd, window_count, process_count, env_driver, env_cuda, env_cudnn, "
        "env_libtorch, env_trainbench, env_host, env_build_type, report, profile_hash) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        v);
    for (std::size_t i = 0; i < run.windows.size(); ++i) {
      const auto& w = run.windows[i];
      db_->query(
          "INSERT INTO tb_windows (run_id, idx, process, samples, elapsed_s, samples_per_s) VALUES (?, ?, ?, ?, ?, ?)",
          {run.id, static_cast<std::int64_t>(i), w.process, w.samples, w.elapsed_s, w.samples_per_s});
    }
    added.push_back(run.id);
  }
  return added;
}

bool valid_series_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

std::vector<series_record> history_store::all_series() {
  std::vector<series_record> out;
  for (const auto& r :
       db_->query("SELECT id, profile_hash, profile_name, machine_class, workload FROM tb_series ORDER BY profile_name, id")) {
    if (!valid_series_id(r.text(0)))
      throw input_error("--db " + db_->where() + ": table tb_series holds the id '" + r.text(0).substr(0, 80) +
                        "', not one trainbench writes (1 to 64 letters, digits, '-' or '_'); nothing was read");
    out.push_back({r.text(0), r.text(1), r.text(2), r.text(3), r.text(4)});
  }
  return out;
}

std::vector<std::string> history_store::branches_of(const std::string& series_id) {
  std::vector<std::string> out;
  for (const auto& r : db_->query("SELECT branch, COUNT(*), MAX(run_time) FROM tb_runs WHERE series_id = ? GROUP BY "
                                  "branch ORDER BY COUNT(*) DESC, MAX(run_time) DESC, branch",
                                  {series_id}))
    out.push_back(r.text(0));
  return out;
}

std::vector<run_record> history_store::runs_of(const std::string& series_id, const std::string& branch) {
  const std::string sql = std::string("SELECT ") + run_columns + " FROM tb_runs WHERE series_id = ?" +
                          (branch.empty() ? "" : " AND branch = ?") + " ORDER BY run_time, id";
  std::vector<sql_value> params{series_id};
  if (!branch.empty()) params.emplace_back(branch);
  std::vector<run_record> out;
  for (const auto& r : db_->query(sql, params)) out.push_back(run_of(r));
  return out;
}

std::vector<window_record> history_store::windows_of(const std::string& run_id) {
  std::vector<window_record> out;
  for (const auto& r : db_->query(
           "SELECT process, samples, elapsed_s, samples_per_s FROM tb_windows WHERE run_id = ? ORDER BY idx", {run_id}))
    out.push_back({r.integer(0), r.integer(1), r.real(2), r.real(3)});
  return out;
}

std::vector<std::vector<window_record>> history_store::windows_of(const std::vector<std::string>& run_ids) {
  std::vector<std::vector<window_record>> out(run_ids.size());
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < run_ids.size(); ++i) index[run_ids[i]] = i;
  constexpr std::size_t chunk = 100;  // placeholders per statement, well below either backend's limit
  for (std::size_t from = 0; from < run_ids.size(); from += chunk) {
    const std::size_t to = std::min(run_ids.size(), from + chunk);
    std::string sql = "SELECT run_id, process, samples, elapsed_s, samples_per_s FROM tb_windows WHERE run_id IN (";
    std::vector<sql_value> params;
    for (std::size_t i = from; i < to; ++i) {
      sql += i == from ? "?" : ", ?";
      params.emplace_back(run_ids[i]);
    }
    for (const auto& r : db_->query(sql + ") ORDER BY run_id, idx", params))
      out[index.at(r.text(0))].push_back({r.integer(1), r.integer(2), r.real(3), r.real(4)});
  }
  return out;
}

std::vector<std::string> history_store::all_branches() {
  std::vector<std::string> out;
  for (const auto& r : db_->query("SELECT DISTINCT branch FROM tb_runs ORDER BY branch")) out.push_back(r.text(0));
  return out;
}

std::string history_store::report_of(const std::string& run_id) {
  const auto rows = db_->query("SELECT report FROM tb_runs WHERE id = ?", {run_id});
  return rows.empty() ? std::string() : rows[0].text(0);
}

std::optional<change_point_set> history_store::change_points_of(const std::string& series_id, const std::string& branch,
                                                                const std::string& algorithm,
                                                                const std::string& parameters) {
  const auto head = db_->query(
      "SELECT version, runs_fingerprint, computed_at FROM tb_change_point_sets WHERE series_id = ? AND branch = ? AND "
      "algorithm = ? AND parameters = ?",
      {series_id, branch, algorithm, parameters});
  if (head.empty()) return std::nullopt;
  change_point_set set;
  set.algorithm = algorithm;
  set.parameters = parameters;
  set.version = head[0].integer(0);
  set.runs_fingerprint = head[0].text(1);
  set.computed_at = head[0].text(2);
  const auto rows = db_->query(
      "SELECT c.run_id, c.previous_run_id, c.n_before, c.n_after, c.mean_before, c.mean_after, c.sd_before, "
      "c.sd_after, c.change_pct, c.p_value, c.qhat, c.environment_changes FROM tb_change_points c JOIN tb_runs r ON "
      "r.id = c.run_id WHERE c.series_id = ? AND c.branch = ? AND c.algorithm = ? AND c.parameters = ? ORDER BY "
      "r.run_time, r.id",
      {series_id, branch, algorithm, parameters});
  for (const auto& r : rows) {
    stored_change_point c;
    c.run_id = r.text(0);
    c.previous_run_id = r.text(1);
    c.n_before = r.integer(2);
    c.n_after = r.integer(3);
    c.mean_before = r.real(4);
    c.mean_after = r.real(5);
    c.sd_before = r.real(6);
    c.sd_after = r.real(7);
    c.change_pct = r.real(8);
    c.p = r.real(9);
    c.qhat = r.real(10);
    c.environment_changes = nlohmann::json::parse(r.text(11)).get<std::vector<std::string>>();
    set.points.push_back(c);
  }
  return set;
}

void history_store::save_change_points(const std::string& series_id, const std::string& branch,
                                       const change_point_set& set) {
  const std::vector<sql_value> key{series_id, branch, set.algorithm, set.parameters};
  db_->query("DELETE FROM tb_change_points WHERE series_id = ? AND branch = ? AND algorithm = ? AND parameters = ?",
             key);
  db_->query("DELETE FROM tb_change_point_sets WHERE series_id = ? AND branch = ? AND algorithm = ? AND parameters = ?",
             key);
  db_->query(
      "INSERT INTO tb_change_point_sets (series_id, branch, algorithm, parameters, version, runs_fingerprint, "
      "computed_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      {series_id, branch, set.algorithm, set.parameters, set.version, set.runs_fingerprint,
       set.computed_at.empty() ? utc_now() : set.computed_at});
  for (const auto& c : set.points)
    db_->query(
        "INSERT INTO tb_change_points (series_id, branch, algorithm, parameters, run_id, previous_run_id, n_before, "
        "n_after, mean_before, mean_after, sd_before, sd_after, change_pct, p_value, qhat, environment_changes) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {series_id, branch, set.algorithm, set.parameters, c.run_id, c.previous_run_id, c.n_before, c.n_after,
         c.mean_before, c.mean_after, c.sd_before, c.sd_after, c.change_pct, c.p, c.qhat,
         nlohmann::json(c.environment_changes).dump()});
}

}  // namespace trainbench
