#include "trainbench/report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <set>

#include "trainbench/config/profile_diff.hpp"
#include "trainbench/measure/variance.hpp"
#include "trainbench/report/report.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string name_of(const json& r) { return r.at("profile").at("name").get<std::string>(); }

// A run that failed or was interrupted still counts on the windows it finished, said loudly.
void warn_partial(const json& r, const char* side, std::vector<std::string>& warnings) {
  const std::string status = r.value("status", "ok");
  if (status == "ok") return;
  const std::size_t done = r.at("results").at("repeats").size();
  const json& m = r.value("measure", json::object());
  const std::string planned = m.contains("repeats") ? " of " + m.at("repeats").dump() : "";
  warnings.push_back("'" + name_of(r) + "': the " + side + " run ended with status '" + status + "' after " +
                     std::to_string(done) + planned + " windows; compared on those");
}

std::string context_key(const json& r, const char* key) {
  const json& c = r.at("context");
  if (std::string(key) == "gpu") return c.at("gpu").is_null() ? "none" : c.at("gpu").value("name", "?");
  if (std::string(key) == "driver") return c.at("gpu").is_null() ? "none" : c.at("gpu").value("driver", "?");
  return c.value(key, "?");
}

// A data-parallel run whose ranks could not be gathered holds one rank's windows, a W-th of the
// job's samples: "1 of its 2 ranks' windows", else nothing.
std::optional<std::string> one_rank_of_job(const json& r) {
  const json& d = r.at("results").value("distributed", json(nullptr));
  if (!d.is_object()) return std::nullopt;
  const int world = d.value("world_size", 1), gathered = d.value("ranks_in_results", world);
  if (gathered >= world) return std::nullopt;
  return std::to_string(gathered) + " of its " + std::to_string(world) + " ranks' windows";
}

bool measured(const pair_row& r) { return !r.base.empty() && !r.candidate.empty(); }

// One workload's reports on one side, pooled: each report's processes keep their own ids.
struct side_profile {
  const json* first = nullptr;  // name, hash, context and the resolved profile come from it
  workload_identity identity;
  std::string key;  // identity.key()
  std::vector<double> windows;
  std::vector<int> process;
  std::vector<double> process_time;  // by process: when it measured (Unix seconds); NaN when unknown
  std::size_t reports = 0;
  bool any_window = false;
};

// "2026-12-04T10:00:00Z" as Unix seconds; NaN otherwise.
double unix_seconds(const std::string& iso) {
  std::tm tm{};
  char z = 0;
  if (std::sscanf(iso.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &z) != 7 ||
      z != 'Z')
    return std::nan("");
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm));
}

// When a report's process measured: its own measured_from_unix_s, else the report's date (a report
// from before the field is one block of time); NaN when neither is there.
double process_time_of(const json& r, int process) {
  const json& procs = r.at("results").value("processes", json(nullptr));
  if (procs.is_object() && procs.contains("per_process") && procs["per_process"].is_array() &&
      static_cast<std::size_t>(process) < procs["per_process"].size()) {
    const json& p = procs["per_process"][static_cast<std::size_t>(process)];
    if (p.is_object() && p.contains("measured_from_unix_s") && p["measured_from_unix_s"].is_number())
      return p["measured_from_unix_s"].get<double>();
  }
  const json& c = r.value("context", json::object());
  if (c.is_object() && c.contains("date") && c["date"].is_string()) return unix_seconds(c["date"].get<std::string>());
  return std::nan("");
}

std::string hash_of(const json& r) { return r.at("profile").at("hash").get<std::string>(); }

void add_report(side_profile& s, const json& r) {
  int next = 0;
  for (int id : s.process) next = std::max(next, id + 1);
  for (const auto& w : r.at("results").at("repeats")) {
    s.windows.push_back(w.at("samples_per_s").get<double>());
    const int p = w.value("process", 0);
    s.process.push_back(next + p);
    if (s.process_time.size() <= static_cast<std::size_t>(next + p)) s.process_time.resize(next + p + 1, std::nan(""));
    s.process_time[static_cast<std::size_t>(next + p)] = process_time_of(r, p);
  }
  ++s.reports;
}

// How the two sides' processes were arranged in time. Sorted by when each measured, one side's
// consecutive processes form a run (they share the machine's state of that time): every run a
// single process is the README's interleaved recipe and the process level holds; otherwise each
// run is one observation (evidence_level::run): "apart" when each side is one run, "runs" when
// runs of several processes alternate. "unknown" when a report does not say when it measured.
void arrange(pair_row& row, const side_profile& b, const side_profile& c) {
  struct at {
    double t;
    int side, process;
  };
  std::vector<at> all;
  for (int side = 0; side < 2; ++side) {
    const side_profile& s = side == 0 ? b : c;
    for (int id : std::set<int>(s.process.begin(), s.process.end())) {
      const double t = static_cast<std::size_t>(id) < s.process_time.size() ? s.process_time[id] : std::nan("");
      if (!std::isfinite(t)) {
        row.arrangement = "unknown";
        return;
      }
      all.push_back({t, side, id});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const at& x, const at& y) { return x.t < y.t; });
  std::map<std::pair<int, int>, int> run_of;
  int run = -1, last_side = -1;
  bool single = true;
  std::size_t size = 0;
  for (const auto& a : all) {
    if (a.side != last_side) {
      ++run;
      last_side = a.side;
      size = 0;
    }
    single = single && ++size == 1;
    run_of[{a.side, a.process}] = run;
  }
  if (single) {
    row.arrangement = "interleaved";
    return;
  }
  row.arrangement = run == 1 ? "apart" : "runs";
  row.level = evidence_level::run;
  for (int p : row.base_process) row.base_run.push_back(run_of.at({0, p}));
  for (int p : row.candidate_process) row.candidate_run.push_back(run_of.at({1, p}));
}

std::size_t runs_in(const std::vector<int>& run) { return std::set<int>(run.begin(), run.end()).size(); }

// What a row tested at the run level says about the arrangement, after its verdict.
void explain_arrangement(pair_row& r) {
  if (r.level != evidence_level::run) return;
  const std::size_t n = runs_in(r.base_run), m = runs_in(r.candidate_run);
  const std::size_t bp = group_by_process(r.base, r.base_process).size(),
                    cp = group_by_process(r.candidate, r.candidate_process).size();
  const std::string how = "the base's " + std::to_string(bp) + " process" + (bp == 1 ? "" : "es") + " and the " +
                          "candidate's " + std::to_string(cp) + " were measured " +
                          (r.arrangement == "apart" ? "apart, one run a side"
                                                    : "in alternating runs (" + std::to_string(n) + " vs " +
                                                          std::to_string(m) + ")") +
                          ", and the processes of one run share its level (the machine's state at that time)";
  if (n < 2 || n + m < 3) {
    r.result = verdict::ambiguous;
    r.to_decide.reset();
    r.reason = "the process level cannot decide it: " + how +
               "; interleave the two sides process by process (the README's recipe), or measure several runs a "
               "side, alternating (each side's runs then count, at least 2 a side)";
    return;
  }
  r.reason += " (tested across runs: " + how + ")";
}

// A side's reports grouped by what they measured (identity_of): several reports of one workload
// (runs of it, one process or more each) are one sample of processes.
std::vector<side_profile> pool_side(const std::vector<json>& reports, const char* side,
                                    std::vector<std::string>& warnings) {
  std::vector<side_profile> out;
  for (const auto& r : reports) {
    warn_partial(r, side, warnings);
    const workload_identity id = identity_of(r);
    const std::string key = id.key();
    auto it = std::find_if(out.begin(), out.end(), [&](const side_profile& s) { return s.key == key; });
    if (it == out.end()) {
      side_profile s;
      s.first = &r;
      s.identity = id;
      s.key = key;
      it = out.insert(out.end(), s);
    } else if (hash_of(r) != hash_of(*it->first)) {
      warnings.push_back("'" + name_of(r) + "' pooled with '" + name_of(*it->first) + "' on the " + side +
                         " side: the same workload, measured with another plan or under another name");
    }
    if (const auto partial = one_rank_of_job(r)) {
      warnings.push_back("'" + name_of(r) + "': the " + side + " report holds " + *partial +
                         "; its windows are not the job's and are left out");
      continue;
    }
    add_report(*it, r);
  }
  for (const auto& s : out) {
    if (s.reports < 2) continue;
    std::set<int> ids(s.process.begin(), s.process.end());
    warnings.push_back("'" + name_of(*s.first) + "': " + std::to_string(s.reports) + " " + side +
                       " reports of this profile pooled (" + std::to_string(ids.size()) + " processes)");
  }
  return out;
}

// The candidate that measures the same thing as b: the same identity_of key (the workload's
// non-default keys, the kind of measurement, the world size); of several, the same full profile
// hash first, then the same name.
std::optional<std::size_t> match_of(const side_profile& b, const std::vector<side_profile>& candidate,
                                    const std::vector<bool>& used, std::string& how) {
  std::optional<std::size_t> by_name, any;
  for (std::size_t i = 0; i < candidate.size(); ++i) {
    if (used[i] || candidate[i].key != b.key) continue;
    if (hash_of(*candidate[i].first) == hash_of(*b.first)) {
      how = "hash";
      return i;
    }
    if (!by_name && name_of(*candidate[i].first) == name_of(*b.first)) by_name = i;
    if (!any) any = i;
  }
  how = "workload";
  return by_name ? by_name : any;
}

pair_row row_of(const side_profile& b, const side_profile& c, const std::string& how, evidence_level level,
                std::vector<std::string>& warnings) {
  const json& br = *b.first;
  const json& cr = *c.first;
  if (how == "workload") {
    const auto diffs =
        profile_differences(br.at("profile").value("resolved", ""), cr.at("profile").value("resolved", ""));
    std::string shown;
    for (std::size_t i = 0; i < diffs.size() && i < 6; ++i) shown += (i ? "; " : "") + diffs[i];
    if (diffs.size() > 6) shown += "; and " + std::to_string(diffs.size() - 6) + " more";
    warnings.push_back("'" + name_of(br) + "'" + (name_of(cr) != name_of(br) ? " vs '" + name_of(cr) + "'" : "") +
                       ": the same workload, matched although the profiles differ" +
                       (shown.empty() ? std::string(" (their hashes)") : " in " + shown) +
                       " (names, descriptions, report paths and the measurement plan are not the workload)");
  }
  for (const char* key : {"gpu", "driver", "libtorch", "build_type"}) {
    if (context_key(br, key) != context_key(cr, key))
      warnings.push_back("'" + name_of(br) + "': " + key + " differs: '" + context_key(br, key) + "' vs '" +
                         context_key(cr, key) + "'");
  }
  pair_row row;
  row.name = name_of(br);
  row.match = how;
  row.level = level;
  row.base = b.windows;
  row.base_process = b.process;
  row.candidate = c.windows;
  row.candidate_process = c.process;
  return row;
}

// What else tells two same-name profiles apart beyond their resolved YAML.
std::vector<std::string> identity_differences(const side_profile& b, const side_profile& c) {
  std::vector<std::string> out;
  const workload_identity &x = b.identity, &y = c.identity;
  if (x.measurement != y.measurement) out.push_back("measured: " + x.measurement + " vs " + y.measurement);
  if (x.world_size != y.world_size)
    out.push_back("world size: " + std::to_string(x.world_size) + " vs " + std::to_string(y.world_size));
  return out;
}

// Profiles of the same name on both sides that were not matched: say what changed in them.
std::vector<unmatched_pair> same_name_pairs(const std::vector<side_profile>& base,
                                            const std::vector<side_profile>& candidate,
                                            const std::vector<std::string>& only_base,
                                            const std::vector<std::string>& only_candidate) {
  std::vector<unmatched_pair> out;
  for (const auto& name : only_base) {
    if (std::find(only_candidate.begin(), only_candidate.end(), name) == only_candidate.end()) continue;
    if (std::any_of(out.begin(), out.end(), [&](const unmatched_pair& u) { return u.name == name; })) continue;
    const auto named = [&](const side_profile& s) { return name_of(*s.first) == name; };
    const side_profile& b = *std::find_if(base.begin(), base.end(), named);
    const side_profile& c = *std::find_if(candidate.begin(), candidate.end(), named);
    unmatched_pair u;
    u.name = name;
    u.differences = identity_differences(b, c);
    auto yaml =
        profile_differences(b.first->at("profile").value("resolved", ""), c.first->at("profile").value("resolved", ""));
    // What tells the two apart: the workload keys; the plan's keys would only distract.
    yaml.erase(std::remove_if(yaml.begin(), yaml.end(),
                              [](const std::string& d) {
                                for (const auto& k : non_workload_keys())
                                  if (d.rfind(k + ":", 0) == 0 || d.rfind(k + ".", 0) == 0) return true;
                                return false;
                              }),
               yaml.end());
    u.differences.insert(u.differences.end(), yaml.begin(), yaml.end());
    out.push_back(u);
  }
  return out;
}

// The measured rows are one family: Holm's correction across them (unless turned off), then
// each row's verdict, and the geometric mean of their ratios.
void decide_rows(comparison& c) {
  std::vector<pair_row*> family;
  for (auto& r : c.rows)
    if (measured(r)) family.push_back(&r);
  c.family_size = family.size();
  if (c.family_correction && family.size() > 1) {
    correct_family(family);
    const std::vector<const pair_row*> view(family.begin(), family.end());
    if (const auto w = family_warning(view, c.alpha)) c.warnings.push_back(*w);
  }
  double log_sum = 0;
  for (auto* r : family) {
    *r = decide(*r, c.threshold_pct, c.alpha);
    explain_arrangement(*r);
    log_sum += std::log(r->candidate_median / r->base_median);
  }
  if (!family.empty()) c.geomean_ratio = std::exp(log_sum / static_cast<double>(family.size()));
}

}  // namespace

bool is_run_report(const json& j) { return j.is_object() && (j.contains("schema_version") || j.contains("results")); }

comparison compare_reports(const std::vector<json>& base_reports, const std::vector<json>& candidate_reports,
                           const compare_options& options) {
  comparison out;
  out.threshold_pct = options.threshold_pct;
  out.alpha = options.alpha;
  out.family_correction = options.family_correction;
  out.level = options.level;
  const auto base = pool_side(base_reports, "base", out.warnings);
  const auto candidate = pool_side(candidate_reports, "candidate", out.warnings);
  std::vector<bool> used(candidate.size(), false);
  for (const auto& b : base) {
    std::string how;
    const auto hit = match_of(b, candidate, used, how);
    if (!hit) {
      out.only_base.push_back(name_of(*b.first));
      continue;
    }
    used[*hit] = true;
    const side_profile& c = candidate[*hit];
    pair_row row = row_of(b, c, how, options.level, out.warnings);
    if (options.level == evidence_level::process)
      arrange(row, b, c);
    else
      row.arrangement = "not checked";
    if (measured(row)) {
      row = measure_pair(row, options.alpha);
    } else {
      row.result = verdict::ambiguous;
      row.reason = "a side has no measured windows (status " + b.first->value("status", "?") + " / " +
                   c.first->value("status", "?") + ")";
    }
    out.rows.push_back(row);
  }
  for (std::size_t i = 0; i < candidate.size(); ++i)
    if (!used[i]) out.only_candidate.push_back(name_of(*candidate[i].first));
  out.unmatched = same_name_pairs(base, candidate, out.only_base, out.only_candidate);
  // A name on both sides is listed once, as unmatched with the keys that differ.
  for (const auto& u : out.unmatched)
    for (auto* side : {&out.only_base, &out.only_candidate})
      side->erase(std::remove(side->begin(), side->end(), u.name), side->end());
  decide_rows(out);
  return out;
}

// Through config's profile_changes, so compare and the ladder name a changed key the same way.
std::vector<std::string> profile_differences(const std::string& base_yaml, const std::string& candidate_yaml) {
  std::vector<key_change> changes;
  try {
    changes = profile_changes(base_yaml, candidate_yaml);
  } catch (const input_error&) {
    return {};  // not YAML: nothing to list, the names are still reported as unmatched
  }
  auto shown = [](const std::string& v) { return v.empty() ? std::string("(absent)") : v; };
  std::vector<std::string> out;
  for (const auto& c : changes) out.push_back(c.key + ": " + shown(c.before) + " vs " + shown(c.after));
  return out;
}

namespace {

json read_report(const fs::path& f, bool in_folder, std::vector<std::string>* skipped) {
  json j;
  try {
    j = json::parse(read_text_file(f));
  } catch (const json::exception& e) {
    throw input_error("'" + f.string() + "': not a JSON report: " + e.what());
  }
  if (in_folder && !is_run_report(j)) {
    if (skipped) skipped->push_back(f.string());
    return nullptr;
  }
  if (!j.is_object() || !j.contains("schema_version") || j["schema_version"] != report_schema_version)
    throw input_error("'" + f.string() + "': schema_version " +
                      (j.is_object() && j.contains("schema_version") ? j["schema_version"].dump() : "missing") +
                      ", this trainbench reads " + std::to_string(report_schema_version));
  try {
    (void)j.at("profile").at("hash");
    (void)j.at("results").at("repeats");
  } catch (const json::exception& e) {
    throw input_error("'" + f.string() + "': incomplete report: " + e.what());
  }
  return j;
}

}  // namespace

std::vector<json> read_reports(const std::string& file_or_folder, std::vector<std::string>* skipped) {
  std::vector<fs::path> files;
  const bool folder = fs::is_directory(file_or_folder);
  if (folder) {
    for (const auto& e : fs::directory_iterator(file_or_folder))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return natural_less(a.string(), b.string()); });
  } else {
    files.push_back(file_or_folder);
  }
  std::vector<json> out;
  for (const auto& f : files) {
    json j = read_report(f, folder, skipped);
    if (!j.is_null()) out.push_back(std::move(j));
  }
  if (folder && out.empty()) throw input_error("'" + file_or_folder + "': no *.json run reports in this folder");
  return out;
}

namespace {

json interval_json(const std::optional<change_interval>& i) {
  if (!i) return nullptr;
  return {{"confidence", i->confidence},
          {"estimate_pct", i->estimate_pct},
          {"low_pct", i->low_pct},
          {"high_pct", i->high_pct}};
}

std::string interval_text(const std::optional<change_interval>& i) {
  if (!i) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%+.1f%%, %+.1f%%]", i->low_pct, i->high_pct);
  return buf;
}

// The column title says the interval's confidence, from the first row that has one.
std::string interval_title(const comparison& c) {
  for (const auto& r : c.rows)
    if (r.interval) return std::to_string(static_cast<int>(std::lround(100 * r.interval->confidence))) + "% CI";
  return "CI";
}

json optional_number(bool present, double v) { return present ? json(v) : json(nullptr); }

json comparison_json(const comparison& c) {
  json j = {{"alpha", c.alpha},
            {"threshold_pct", c.threshold_pct},
            {"level", to_string(c.level)},
            {"assumes", level_assumption(c.level)},
            {"family_correction", c.family_correction && c.family_size > 1 ? "holm" : "none"},
            {"family_size", c.family_size},
            {"rows", json::array()},
            {"only_base", c.only_base},
            {"only_candidate", c.only_candidate},
            {"unmatched", json::array()},
            {"skipped", c.skipped},
            {"warnings", c.warnings},
            {"geomean_ratio", c.geomean_ratio ? json(*c.geomean_ratio) : json(nullptr)}};
  for (const auto& r : c.rows) {
    const bool m = measured(r);
    const bool by_process = r.level == evidence_level::process, by_run = r.level == evidence_level::run;
    const json to_decide = r.to_decide ? json(*r.to_decide) : json(nullptr);
    j["rows"].push_back({{"name", r.name},
                         {"match", r.match},
                         {"level", to_string(r.level)},
                         {"base_windows", r.base.size()},
                         {"candidate_windows", r.candidate.size()},
                         {"base_processes", group_by_process(r.base, r.base_process).size()},
                         {"candidate_processes", group_by_process(r.candidate, r.candidate_process).size()},
                         {"base_median", optional_number(m, r.base_median)},
                         {"candidate_median", optional_number(m, r.candidate_median)},
                         {"change_pct", optional_number(m, r.change_pct)},
                         {"interval", interval_json(r.interval)},
                         {"u", optional_number(m, r.test.u)},
                         {"p", optional_number(m, r.test.p)},
                         {"p_adjusted", optional_number(m, r.p_adjusted)},
                         {"exact", m && r.test.exact},
                         {"ties", m && r.test.ties},
                         {"verdict", to_string(r.result)},
                         {"reason", r.reason},
                         {"processes_to_decide", by_process ? to_decide : json(nullptr)},
                         {"windows_to_decide", r.level == evidence_level::window ? to_decide : json(nullptr)},
                         {"arrangement", r.arrangement.empty() ? "unknown" : r.arrangement},
                         {"base_runs", by_run ? json(runs_in(r.base_run)) : json(nullptr)},
                         {"candidate_runs", by_run ? json(runs_in(r.candidate_run)) : json(nullptr)},
                         {"runs_to_decide", by_run ? to_decide : json(nullptr)}});
  }
  for (const auto& u : c.unmatched) j["unmatched"].push_back({{"name", u.name}, {"differences", u.differences}});
  return j;
}

std::string md_cell(const std::string& s) { return replace_all(s, "|", "\\|"); }

std::string p_cell(const pair_row& r, double p, double alpha) { return measured(r) ? format_p(p, alpha) : "-"; }

std::string unmatched_text(const unmatched_pair& u, bool md) {
  std::string out = (md ? "- not compared: " : "not compared: ") + u.name + ": the profiles differ in ";
  const std::size_t shown = std::min<std::size_t>(u.differences.size(), 8);
  for (std::size_t i = 0; i < shown; ++i)
    out += (i ? "; " : "") + (md ? "`" + u.differences[i] + "`" : u.differences[i]);
  if (u.differences.size() > shown) out += "; and " + std::to_string(u.differences.size() - shown) + " more";
  if (u.differences.empty()) out += "keys that could not be read (no resolved profile in the reports)";
  return out + "\n";
}

}  // namespace

namespace {

std::string number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The table: profile, base, candidate, n (processes or windows per side), change, CI, p,
// [p after Holm's correction], verdict (reason).
std::vector<std::vector<std::string>> table_of(const comparison& c, bool holm) {
  std::vector<std::vector<std::string>> t;
  std::vector<std::string> head{"profile",
                                "base samples/s",
                                "candidate samples/s",
                                c.level == evidence_level::process ? "processes" : "windows",
                                "change",
                                interval_title(c),
                                "p"};
  if (holm) head.push_back("p (Holm)");
  head.push_back("verdict");
  t.push_back(head);
  for (const auto& r : c.rows) {
    const bool m = measured(r);
    std::vector<std::string> row{
        r.name,
        m ? number("%.1f", r.base_median) : "-",
        m ? number("%.1f", r.candidate_median) : "-",
        m ? std::to_string(r.base_units.size()) + "/" + std::to_string(r.candidate_units.size()) : "-",
        m ? number("%+.1f%%", r.change_pct) : "-",
        interval_text(r.interval),
        p_cell(r, r.test.p, c.alpha)};
    if (holm) row.push_back(p_cell(r, r.p_adjusted, c.alpha));
    row.push_back(std::string(to_string(r.result)) + " (" + r.reason + ")");
    t.push_back(row);
  }
  if (c.geomean_ratio) {
    std::vector<std::string> row(head.size());
    row[0] = "geometric mean";
    row[4] = number("%+.1f%%", 100.0 * (*c.geomean_ratio - 1));
    t.push_back(row);
  }
  return t;
}

std::string markdown_table(const std::vector<std::vector<std::string>>& t) {
  std::string out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    for (std::size_t j = 0; j < t[i].size(); ++j) {
      std::string cell = md_cell(t[i][j]);
      if (i > 0 && j + 1 == t[i].size() && !cell.empty()) {
        const auto space = cell.find(' ');  // the verdict in bold, its reason after it
        cell = "**" + cell.substr(0, space) + "**" + (space == std::string::npos ? "" : cell.substr(space));
      }
      out += "| " + cell + " ";
    }
    out += "|\n";
    if (i == 0) {
      out += "|---|";
      for (std::size_t j = 1; j + 1 < t[i].size(); ++j) out += "---:|";
      out += "---|\n";
    }
  }
  return out;
}

std::string text_table(const std::vector<std::vector<std::string>>& t) {
  static const int widths[] = {-28, 12, 12, 9, 9, 18, 9, 9};
  std::string out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    std::string line;
    for (std::size_t j = 0; j < t[i].size(); ++j) {
      if (j + 1 == t[i].size()) {
        line += "  " + t[i][j];
        break;
      }
      const std::string& cell = i == 0 && j == 1   ? std::string("base")
                                : i == 0 && j == 2 ? std::string("candidate")
                                                   : t[i][j];
      const int w = widths[std::min<std::size_t>(j, 7)];
      char buf[128];
      std::snprintf(buf, sizeof buf, "%*s", w, cell.c_str());
      line += (j ? " " : "") + std::string(buf);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string format_comparison(const comparison& c, const std::string& format) {
  if (format == "json") return comparison_json(c).dump(2) + "\n";
  const bool md = format == "markdown";
  std::string out = (md ? "_" : "") + std::string("level: ") + to_string(c.level) + ", " + level_assumption(c.level) +
                    (md ? "_\n\n" : "\n");
  for (const auto& w : c.warnings) out += (md ? "> **warning:** " + md_cell(w) : "WARNING: " + w) + "\n";
  if (!c.warnings.empty()) out += "\n";
  if (!c.rows.empty()) {
    const auto table = table_of(c, c.family_correction && c.family_size > 1);
    out += md ? markdown_table(table) : text_table(table);
  }
  for (const auto& n : c.only_base) out += (md ? "- only in base: " + md_cell(n) : "only in base: " + n) + "\n";
  for (const auto& n : c.only_candidate)
    out += (md ? "- only in candidate: " + md_cell(n) : "only in candidate: " + n) + "\n";
  for (const auto& u : c.unmatched) out += unmatched_text(u, md);
  for (const auto& f : c.skipped)
    out += (md ? "- skipped, not a run report: " : "skipped, not a run report: ") + f + "\n";
  return out;
}

int compare_command(const compare_request& req) {
  if (req.options.threshold_pct < 0) throw input_error("--threshold must be >= 0");
  if (req.options.alpha <= 0 || req.options.alpha >= 1) throw input_error("--alpha must be in (0, 1)");
  std::vector<std::string> skipped;
  const auto base = read_reports(req.base, &skipped);
  const auto candidate = read_reports(req.candidate, &skipped);
  comparison c = compare_reports(base, candidate, req.options);
  c.skipped = skipped;
  std::cout << format_comparison(c, req.format) << std::flush;
  int code = exit_code::ok;
  for (const auto& r : c.rows) {
    if (r.result == verdict::slower) code = exit_code::failed;
    // A candidate that crashed before its first window would otherwise pass as AMBIGUOUS.
    if (!r.base.empty() && r.candidate.empty()) {
      log_error("compare: the candidate run of '" + r.name + "' measured no window (" + r.reason +
                "); a CI gate cannot pass on it");
      code = exit_code::failed;
    }
  }
  // Nothing compared because a candidate crashed is a failed candidate (exit 1), not bad input.
  if (c.family_size == 0 && code == exit_code::ok)
    throw input_error("compare: no profile could be compared (" + std::to_string(c.only_base.size()) +
                      " only in base, " + std::to_string(c.only_candidate.size()) + " only in candidate, " +
                      std::to_string(c.unmatched.size()) + " with the same name but another profile, " +
                      std::to_string(c.rows.size()) + " without measured windows); a CI gate must not pass on nothing");
  return code;
}

}  // namespace trainbench
