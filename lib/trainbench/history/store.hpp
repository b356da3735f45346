#pragma once
// The history of runs: series, runs, their windows and the change points found in them, kept in
// a database (history/database.hpp). Commands call it; it never calls a command. No torch here.
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/history/database.hpp"

namespace trainbench {

// The schema this trainbench writes; a database at a later version is refused.
constexpr int history_schema_version = 3;

// What is kept per run beside the series key, in this order; a change of any of them between two
// runs is shown along the series and named at a change point that spans it. `profile` is the
// run's full profile hash: an edit that leaves the workload alone (a name, a description, the
// report path, the measurement plan) stays in the series and shows here.
constexpr std::array<const char*, 8> environment_fields{"driver",     "cuda", "cudnn",      "libtorch",
                                                        "trainbench", "host", "build_type", "profile"};
using environment = std::array<std::string, environment_fields.size()>;

struct window_record {
  std::int64_t process = 0;  // the fresh process that measured it (0 in reports without `process`)
  std::int64_t samples = 0;
  double elapsed_s = 0, samples_per_s = 0;
};

struct run_record {
  std::string id;  // SHA-256 of the report's JSON (canonical form): the key that makes adding idempotent
  std::string series_id, profile_hash, profile_name, machine_class;
  std::string workload;              // report/identity.hpp's key: with machine_class, the series
  std::string commit, branch, time;  // time: ISO 8601 UTC, the series' order
  std::string status = "ok";         // ok | error | interrupted
  std::string error_kind;
  std::string source;  // the file it was added from
  environment env;
  // Over the measured windows (null when none finished): the median samples/s, its quartiles,
  // and the run's own sd of that median (from its processes, else its windows; 0 when unknown).
  std::optional<double> median, q1, q3;
  double median_sd = 0;
  std::int64_t window_count = 0, process_count = 0;
  std::vector<window_record> windows;  // filled by add, and by windows_of
  // From the report (not stored): a data-parallel run whose ranks could not be gathered holds
  // the windows of fewer ranks than it ran on; those are not the job's windows.
  std::int64_t world_size = 1, ranks_in_results = 1;
  std::string report;                  // the report's JSON as read; empty unless asked for
};

// A series is one workload (report/identity.hpp: the non-default workload keys, the kind of
// measurement, the world size) on one machine class; profile_hash and profile_name are its latest
// run's.
struct series_record {
  std::string id, profile_hash, profile_name, machine_class;
  std::string workload;  // identity key; empty in a series whose runs' reports could not be read again
};

// A series id as trainbench writes it: 1 to 64 letters, digits, '-' or '_'. show names files
// after it and links to it, so an id read from a database that breaks this rule (one written by
// hand or by something else) is refused on read.
bool valid_series_id(const std::string& id);

// One change point as stored: where it is in the series (the runs on either side), what the
// algorithm found, and which environment fields changed across it ("driver 570.86 -> 575.51").
struct stored_change_point {
  std::string run_id, previous_run_id;
  std::int64_t n_before = 0, n_after = 0;
  double mean_before = 0, mean_after = 0, sd_before = 0, sd_after = 0, change_pct = 0, p = 1, qhat = 0;
  std::vector<std::string> environment_changes;
};

// How a set of change points was computed, so it can be recomputed and checked for staleness.
struct change_point_set {
  std::string algorithm;  // "e-divisive-means"
  std::int64_t version = 0;
  std::string parameters;        // measure/change_points.hpp describe()
  std::string runs_fingerprint;  // over the ordered run ids it was computed on
  std::string computed_at;
  std::vector<stored_change_point> points;
};

class history_store {
 public:
  // Creates the schema in an empty database, migrates an older one, and refuses (input_error,
  // exit 2) one written by a newer trainbench.
  explicit history_store(std::unique_ptr<database> db);

  // Adds the runs not present yet (by id), each with its windows; returns the ids that were new.
  // The caller holds a write transaction.
  std::vector<std::string> add_runs(const std::vector<run_record>& runs);
  std::vector<series_record> all_series();
  // The branches with runs in a series, the one with most runs first.
  std::vector<std::string> branches_of(const std::string& series_id);
  // A series' runs on a branch (every branch when empty) in time order, without windows or report.
  std::vector<run_record> runs_of(const std::string& series_id, const std::string& branch);
  std::vector<window_record> windows_of(const std::string& run_id);
  // The windows of several runs (parallel to run_ids), in a few queries rather than one a run.
  std::vector<std::vector<window_record>> windows_of(const std::vector<std::string>& run_ids);
  // Every branch with a run, in name order.
  std::vector<std::string> all_branches();
  std::string report_of(const std::string& run_id);
  std::optional<change_point_set> change_points_of(const std::string& series_id, const std::string& branch,
                                                   const std::string& algorithm, const std::string& parameters);
  // Replaces the set of the same series, branch, algorithm and parameters. The caller holds a
  // write transaction.
  void save_change_points(const std::string& series_id, const std::string& branch, const change_point_set& set);

  database& db() { return *db_; }
  int schema_version();

 private:
  void migrate();
  std::unique_ptr<database> db_;
};

// Applies the schema's migrations up to `version` only (tests use it to make an older database).
void migrate_to(database& db, int version);

}  // namespace trainbench
