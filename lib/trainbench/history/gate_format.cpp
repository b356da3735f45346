// The gate's three outputs: the console's text, a pull-request comment (markdown) and JSON.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "trainbench/history/database.hpp"
#include "trainbench/history/gate.hpp"
#include "trainbench/measure/variance.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
using nlohmann::json;

namespace {

std::string number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string verdict_of(const gate_series& g) {
  if (g.rule == baseline_rule::none) return "NO BASELINE";
  if (!g.measured) return "NO WINDOWS";
  return to_string(g.row.result);
}

std::size_t processes(const std::vector<double>& windows, const std::vector<int>& process) {
  return windows.empty() ? 0 : group_by_process(windows, process).size();
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string baseline_text(const gate_series& g) {
  if (g.baseline.empty()) return "none";
  std::string commits = g.baseline.front().commit.substr(0, 12);
  if (g.baseline.back().commit != g.baseline.front().commit) commits += "..." + g.baseline.back().commit.substr(0, 12);
  return plural(g.baseline.size(), "run", "runs") + ", " +
         plural(processes(g.row.base, g.row.base_process), "process", "processes") + ", " + commits;
}

std::string candidate_text(const gate_series& g) {
  return plural(g.candidate.size(), "run", "runs") + ", " +
         plural(processes(g.row.candidate, g.row.candidate_process), "process", "processes");
}

std::string level_text(const gate_series& g) {
  if (g.baseline.empty()) return "";
  return g.change_point_commit.empty() ? "no change point"
                                       : "since change point " + g.change_point_commit.substr(0, 12) + " (" +
                                             number("%+.1f%%", g.change_point_pct) + ")";
}

// The candidate's median over the baseline's, and the interval of that ratio at 1 - alpha.
std::string ratio_text(const gate_series& g) {
  if (!g.measured) return "-";
  const double ratio = g.row.candidate_median / g.row.base_median;
  std::string out = number("%.3f", ratio);
  if (g.rule == baseline_rule::test && g.row.interval)
    out += " [" + number("%.3f", 1 + g.row.interval->low_pct / 100) + ", " +
           number("%.3f", 1 + g.row.interval->high_pct / 100) + "]";
  return out;
}

std::string p_text(const gate_series& g, double alpha) {
  if (g.rule != baseline_rule::test || !g.measured) return "";
  std::string out = "p = " + format_p(g.row.test.p, alpha);
  if (g.row.family_size > 1) out += " (Holm: " + format_p(g.row.p_adjusted, alpha) + ")";
  return out;
}

std::string series_title(const gate_series& g) {
  return g.series.profile_name + " [" + g.series.machine_class + "] " + g.series.id;
}

std::string header(const gate_result& r, const std::string& where) {
  return "history gate against " + r.branch + " in " + where + ": run level, alpha " + format_alpha(r.alpha) +
         ", threshold " + number("%g%%", r.threshold_pct) + ", " +
         (r.family_size > 1 ? "Holm's correction over " + std::to_string(r.family_size) + " tested series"
                            : plural(r.family_size, "tested series", "tested series") + " (no correction)");
}

std::string text_of(const gate_result& r) {
  std::string out = header(r, r.where) + "\n";
  for (const auto& w : r.warnings) out += "WARNING: " + w + "\n";
  for (const auto& g : r.series) {
    out += "\n" + series_title(g) + "\n";
    out += "  baseline:  " + baseline_text(g) + (g.baseline.empty() ? "" : " (" + level_text(g) + ")") + "\n";
    out += "  candidate: " + candidate_text(g) + "\n";
    if (g.measured) out += "  ratio:     " + ratio_text(g) + "  " + p_text(g, r.alpha) + "\n";
    out += "  verdict:   " + verdict_of(g) + (g.row.reason.empty() ? "" : " (" + g.row.reason + ")") + "\n";
    for (const auto& e : g.environment_changes) out += "  environment changed: " + e + "\n";
    for (const auto& n : g.notes) out += "  note: " + n + "\n";
  }
  return out + "\ngate: " + r.summary + "\n";
}

}  // namespace

// Text from profiles, reports and the database, as Markdown that renders as that text: no
// emphasis, link, image, HTML, table cell, mention, issue link or formula of its own, on one line.
std::string markdown_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r') {
      out += ' ';
      continue;
    }
    if (std::string_view("\\`*_[]<>&|~@#$!").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The same as a code span: backticks cannot close it early, and `|` cannot split a table cell.
std::string markdown_code(const std::string& s) {
  std::string inner;
  for (char c : s) {
    if (c == '\n' || c == '\r')
      inner += ' ';
    else if (c == '`')
      inner += '\'';
    else if (c == '|')
      inner += "\\|";
    else
      inner += c;
  }
  return "`" + inner + "`";
}

std::string public_where(const std::string& where) {
  if (is_postgres_url(where)) {
    // postgresql://user:password@host:port/name?options: the name alone (host, user, password
    // and options stay out of a public comment).
    const std::size_t start = where.find("://") + 3;
    const std::size_t slash = where.find('/', start), query = where.find('?', start);
    std::string name;
    if (slash != std::string::npos && (query == std::string::npos || slash < query))
      name = where.substr(slash + 1, query == std::string::npos ? std::string::npos : query - slash - 1);
    return name.empty() ? "a PostgreSQL database" : "PostgreSQL database " + name;
  }
  const std::string file = std::filesystem::path(where).filename().string();
  return file.empty() ? "a SQLite database" : file;
}

namespace {

std::string md(const std::string& s) { return markdown_text(s); }

std::string markdown_of(const gate_result& r) {
  std::string out = "**trainbench history gate: " + md(r.summary) + "**\n\n_" + md(header(r, public_where(r.where))) +
                    "_\n\n";
  for (const auto& w : r.warnings) out += "> **warning:** " + md(w) + "\n";
  if (!r.warnings.empty()) out += "\n";
  const std::string ci = number("%g", 100 * (1 - r.alpha)) + "% CI";
  out += "| series | baseline runs (commits) | candidate | ratio [" + ci + "] | verdict |\n";
  out += "|---|---|---|---:|---|\n";
  for (const auto& g : r.series) {
    std::string base = baseline_text(g);
    if (!g.baseline.empty()) base += "; " + level_text(g);
    std::string verdict = "**" + verdict_of(g) + "**";
    if (!g.row.reason.empty()) verdict += " (" + md(g.row.reason) + ")";
    out += "| " + md(g.series.profile_name) + " <br>" + markdown_code(g.series.machine_class) + " | " + md(base) +
           " | " + md(candidate_text(g)) + " | " + md(ratio_text(g)) + " | " + verdict + " |\n";
  }
  std::string notes;
  for (const auto& g : r.series) {
    if (!g.environment_changes.empty()) {
      std::vector<std::string> changes;
      for (const auto& e : g.environment_changes) changes.push_back(markdown_code(e));
      notes += "- " + md(g.series.profile_name) + ": environment changed since the baseline: " + join(changes, ", ") +
               "\n";
    }
    for (const auto& n : g.notes) notes += "- " + md(g.series.profile_name) + ": " + md(n) + "\n";
  }
  if (!notes.empty()) out += "\n" + notes;
  return out;
}

json interval_json(const gate_series& g) {
  if (g.rule != baseline_rule::test || !g.measured || !g.row.interval) return nullptr;
  const auto& i = *g.row.interval;
  return {{"confidence", i.confidence}, {"low", 1 + i.low_pct / 100}, {"high", 1 + i.high_pct / 100}};
}

json maybe(bool present, double v) { return present ? json(v) : json(nullptr); }

json series_json(const gate_series& g) {
  const bool tested = g.rule == baseline_rule::test && g.measured;
  json runs = json::array(), commits = json::array();
  for (const auto& b : g.baseline) {
    runs.push_back(b.id);
    commits.push_back(b.commit);
  }
  json sources = json::array();
  for (const auto& c : g.candidate) sources.push_back(c.source);
  return {{"id", g.series.id},
          {"profile_name", g.series.profile_name},
          {"profile_hash", g.series.profile_hash},
          {"machine_class", g.series.machine_class},
          {"rule", to_string(g.rule)},
          {"baseline",
           {{"runs", g.baseline.size()},
            {"processes", processes(g.row.base, g.row.base_process)},
            {"windows", g.row.base.size()},
            {"first_commit", g.baseline.empty() ? json(nullptr) : json(g.baseline.front().commit)},
            {"last_commit", g.baseline.empty() ? json(nullptr) : json(g.baseline.back().commit)},
            {"change_point_commit", g.change_point_commit.empty() ? json(nullptr) : json(g.change_point_commit)},
            {"change_point_pct", g.change_point_commit.empty() ? json(nullptr) : json(g.change_point_pct)},
            {"runs_since_change_point", g.runs_since_change},
            {"run_ids", runs},
            {"commits", commits},
            {"median", maybe(g.measured, g.row.base_median)}}},
          {"candidate",
           {{"runs", g.candidate.size()},
            {"processes", processes(g.row.candidate, g.row.candidate_process)},
            {"windows", g.row.candidate.size()},
            {"sources", sources},
            {"median", maybe(g.measured, g.row.candidate_median)}}},
          {"ratio", maybe(g.measured, g.row.candidate_median / g.row.base_median)},
          {"change_pct", maybe(g.measured, g.row.change_pct)},
          {"interval", interval_json(g)},
          {"p", maybe(tested, g.row.test.p)},
          {"p_adjusted", maybe(tested, g.row.p_adjusted)},
          {"verdict", verdict_of(g)},
          {"reason", g.row.reason},
          {"environment_changes", g.environment_changes},
          {"notes", g.notes}};
}

json json_of(const gate_result& r) {
  json j = {{"database", r.where},
            {"branch", r.branch},
            {"level", "run"},
            {"alpha", r.alpha},
            {"threshold_pct", r.threshold_pct},
            {"min_runs", r.min_runs},
            {"baseline_runs", r.baseline_runs},
            {"require_baseline", r.require_baseline},
            {"family_correction", r.family_size > 1 ? "holm" : "none"},
            {"family_size", r.family_size},
            {"series", json::array()},
            {"warnings", r.warnings},
            {"summary", r.summary},
            {"exit_code", r.exit_code}};
  for (const auto& g : r.series) j["series"].push_back(series_json(g));
  return j;
}

}  // namespace

std::string format_gate(const gate_result& gate, const std::string& format) {
  if (format == "json") return json_of(gate).dump(2) + "\n";
  if (format == "markdown") return markdown_of(gate);
  return text_of(gate);
}

}  // namespace trainbench
