#include "trainbench/report/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <set>

#include "trainbench/measure/rank_test.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/report/identity.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {
using nlohmann::json;

double parse_duration(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double scale = 0;
  if (unit.empty() || unit == "s") scale = 1;
  if (unit == "m" || unit == "min") scale = 60;
  if (unit == "h") scale = 3600;
  if (end == text.c_str() || scale == 0 || !std::isfinite(value) || value <= 0)
    throw input_error(what + " '" + text + "': expected a positive duration such as 90s, 10m, 1.5h or 600 (seconds)");
  return value * scale;
}

namespace {

// Every window by process, and what each process cost before its first window, over reports of
// one profile (each report's processes kept apart, as compare pools them).
struct measured_levels {
  std::vector<std::vector<double>> by_process;
  std::vector<double> process_costs, window_costs;
};

measured_levels levels_of(const std::vector<json>& reports) {
  measured_levels out;
  for (const auto& r : reports) {
    const std::size_t first = out.by_process.size();
    for (const auto& w : r.at("results").at("repeats")) {
      const std::size_t at = first + static_cast<std::size_t>(w.value("process", 0));
      if (at >= out.by_process.size()) out.by_process.resize(at + 1);
      out.by_process[at].push_back(w.at("samples_per_s").get<double>());
      out.window_costs.push_back(w.at("elapsed_s").get<double>());
    }
    const json& proc = r.at("results").value("processes", json(nullptr));
    if (!proc.is_object()) continue;
    for (const auto& p : proc.at("per_process"))
      if (p.at("before_first_window_s").is_number())
        out.process_costs.push_back(p["before_first_window_s"].get<double>());
  }
  return out;
}

}  // namespace

budget_plan plan_from_reports(const std::vector<json>& reports, const std::string& source, double budget_s,
                              double alpha) {
  TB_ASSERT(!reports.empty(), "a plan without reports");
  budget_plan p;
  p.profile = reports.front().at("profile").value("name", "?");
  p.profile_path = reports.front().at("profile").value("path", "");
  p.budget_s = budget_s;
  const measured_levels m = levels_of(reports);
  const variance_split split = split_variance(m.by_process);
  const std::string how = " (run --processes 5, or a folder of one-process reports of the profile)";
  if (split.processes < 2)
    throw input_error("plan: '" + source +
                      "' measured one process: the noise between processes is unknown; plan needs two or more "
                      "fresh processes" +
                      how);
  if (!split.within_sd || !split.between_sd)
    throw input_error("plan: '" + source + "' has one window per process: the noise within a process is unknown" + how);
  if (m.process_costs.empty())
    throw input_error("plan: '" + source + "' does not say what a process cost before its first window" + how);
  p.within_sd = *split.within_sd;
  p.between_sd = *split.between_sd;
  p.icc = split.icc.value_or(0.0);
  p.processes = split.processes;
  p.windows = split.windows;
  p.process_cost_s = quantile(m.process_costs, 0.5);
  p.window_cost_s = quantile(m.window_costs, 0.5);
  const auto reach = windows_to_reach(alpha);
  p.min_processes = reach ? static_cast<int>(reach->per_side) : 2;
  p.optimal_windows = optimal_windows(p.within_sd, p.between_sd, p.process_cost_s, p.window_cost_s);
  p.choices = plans_within(p.within_sd, p.between_sd, p.process_cost_s, p.window_cost_s, budget_s, p.min_processes);
  const int per_process = std::max<int>(
      1, static_cast<int>(std::lround(static_cast<double>(p.windows) / static_cast<double>(p.processes))));
  p.as_measured = plan_figures(static_cast<int>(p.processes), per_process, p.within_sd, p.between_sd, p.process_cost_s,
                               p.window_cost_s);
  return p;
}

namespace {

// The best plan and a few around it, by process count: the trade-off in one small table.
std::vector<repetition_plan> shown_choices(const budget_plan& p) {
  if (p.choices.empty()) return {};
  const int best = p.choices.front().processes;
  int most = 0;
  for (const auto& c : p.choices) most = std::max(most, c.processes);
  std::set<int> wanted{p.min_processes, best / 2, best - 1, best, best + 1, best * 2, most};
  std::vector<repetition_plan> out;
  for (const auto& c : p.choices)
    if (wanted.count(c.processes)) out.push_back(c);
  std::sort(out.begin(), out.end(),
            [](const repetition_plan& a, const repetition_plan& b) { return a.processes < b.processes; });
  return out;
}

json plan_json(const repetition_plan& c) {
  return {{"processes", c.processes},      {"windows_per_process", c.windows_per_process},
          {"seconds", c.seconds},          {"process_median_cv", c.unit_sd},
          {"half_width_95", c.half_width}, {"detectable_change_80", c.detectable}};
}

std::string pct(double share) { return fmt::format("{:.1f}%", 100.0 * share); }

std::string plan_line(const repetition_plan& c) {
  return fmt::format(
      "{} processes x {} windows ({:.1f} min): a change between two such runs has a 95% interval of "
      "about ±{}; 80% power to detect {}",
      c.processes, c.windows_per_process, c.seconds / 60.0, pct(c.half_width), pct(c.detectable));
}

std::string text_plan(const budget_plan& p) {
  std::string out =
      fmt::format("plan for {} (measured: {} processes, {} windows)\n", p.profile, p.processes, p.windows);
  out += fmt::format("  noise        cv {} within a process, {} between processes (ICC {:.2f})\n", pct(p.within_sd),
                     pct(p.between_sd), p.icc);
  out += fmt::format("  cost         {:.2f} s per process before its first window, {:.3f} s per window\n",
                     p.process_cost_s, p.window_cost_s);
  if (p.optimal_windows)
    out += fmt::format(
        "  optimum      {:.1f} windows per process (Kalibera and Jones: sqrt(process cost x within^2 / (window cost x "
        "between^2)))\n",
        *p.optimal_windows);
  else
    out += "  optimum      no noise between processes measured: windows are as good as processes here\n";
  out += "  as measured  " + plan_line(p.as_measured) + "\n";
  if (p.choices.empty()) {
    out += fmt::format(
        "  budget       {:.0f} s cannot fit {} processes of {} windows each ({:.0f} s): the fewest processes a "
        "process-level test needs to reach p below alpha, and the fewest windows that measure the noise within one\n",
        p.budget_s, p.min_processes, min_windows_per_process,
        p.min_processes * (p.process_cost_s + min_windows_per_process * p.window_cost_s));
    return out;
  }
  const repetition_plan& best = p.choices.front();
  out += fmt::format("  budget       {:.0f} s: {}\n", p.budget_s, plan_line(best));
  out += "  choices      processes  windows  minutes   ±95%   detects\n";
  for (const auto& c : shown_choices(p))
    out += fmt::format("               {:>9}  {:>7}  {:>7.1f}  {:>5}  {:>8}{}\n", c.processes, c.windows_per_process,
                       c.seconds / 60.0, pct(c.half_width), pct(c.detectable),
                       c.processes == best.processes ? "  <- narrowest" : "");
  out += fmt::format("  run it       trainbench run -c {} --processes {} --set measure.repeats={}\n",
                     p.profile_path.empty() ? "PROFILE" : p.profile_path, best.processes, best.windows_per_process);
  out += fmt::format(
      "  (interval and power are normal approximations for the Mann-Whitney test on process medians; each side of a "
      "comparison needs its own run; fewer than {} processes per side never reach alpha)\n",
      p.min_processes);
  return out;
}

}  // namespace

std::string format_plan(const budget_plan& p, const std::string& format) {
  if (format != "json") return text_plan(p);
  json choices = json::array();
  for (const auto& c : p.choices) choices.push_back(plan_json(c));
  json j = {{"profile", p.profile},
            {"measured", {{"processes", p.processes}, {"windows", p.windows}}},
            {"within_process_cv", p.within_sd},
            {"between_process_cv", p.between_sd},
            {"icc", p.icc},
            {"cost_s", {{"process", p.process_cost_s}, {"window", p.window_cost_s}}},
            {"budget_s", p.budget_s},
            {"min_processes", p.min_processes},
            {"optimal_windows_per_process", p.optimal_windows ? json(*p.optimal_windows) : json(nullptr)},
            {"as_measured", plan_json(p.as_measured)},
            {"best", p.choices.empty() ? json(nullptr) : plan_json(p.choices.front())},
            {"choices", choices}};
  return j.dump(2) + "\n";
}

int plan_command(const plan_request& req) {
  if (req.alpha <= 0 || req.alpha >= 1) throw input_error("--alpha must be in (0, 1)");
  const double budget = parse_duration(req.budget, "--budget");
  const auto reports = read_reports(req.report);
  // One workload (identity_of: a renamed profile, or one measured with another plan, is the same).
  const std::string key = identity_of(reports.front()).key();
  for (const auto& r : reports)
    if (identity_of(r).key() != key)
      throw input_error("plan: '" + req.report + "' holds reports of more than one profile ('" +
                        reports.front().at("profile").value("name", "?") + "' and '" +
                        r.at("profile").value("name", "?") + "'); give the reports of one");
  std::cout << format_plan(plan_from_reports(reports, req.report, budget, req.alpha), req.format) << std::flush;
  return exit_code::ok;
}

}  // namespace trainbench
