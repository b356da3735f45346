#include "trainbench/report/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "trainbench/measure/stats.hpp"
#include "trainbench/measure/t_test.hpp"
#include "trainbench/measure/variance.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

const char* to_string(verdict v) {
  switch (v) {
    case verdict::faster:
      return "FASTER";
    case verdict::slower:
      return "SLOWER";
    case verdict::same:
      return "SAME";
    case verdict::ambiguous:
      return "AMBIGUOUS";
  }
  return "?";
}

const char* to_string(evidence_level l) {
  switch (l) {
    case evidence_level::process:
      return "process";
    case evidence_level::window:
      return "window";
    case evidence_level::run:
      return "run";
  }
  return "?";
}

std::string level_assumption(evidence_level l) {
  if (l == evidence_level::run)
    return "tested across runs: each run (processes measured together at one time) is one observation, its "
           "processes' median medians on the log scale, Student's t between the sides (with one candidate run, its "
           "prediction interval among the baseline's runs), so the machine's drift between runs is part of the test";
  if (l == evidence_level::process)
    return "tested across processes: each process's median window is one observation, so the noise between "
           "processes (memory layout, thread placement, kernels chosen, clocks) is part of the test";
  return "tested across windows: assumes every window independent, which holds only for windows of one process "
         "(as bottleneck interleaves its two loops); across processes it calls unchanged profiles SLOWER or "
         "FASTER far more often than alpha";
}

const char* unit_name(const pair_row& row) {
  return row.level == evidence_level::process ? "processes" : row.level == evidence_level::run ? "runs" : "windows";
}

std::string format_alpha(double alpha) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", alpha);
  return buf;
}

std::string format_p(double p, double alpha) {
  const double shown_alpha = std::strtod(format_alpha(alpha).c_str(), nullptr);
  char buf[40];
  for (int digits = 3; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, p);
    const double shown = std::strtod(buf, nullptr);
    if ((shown < shown_alpha) == (p < alpha) && (shown != shown_alpha || p == alpha)) break;
  }
  return buf;
}

namespace {

template <typename... Args>
std::string printf_string(const char* format, Args... args) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

std::string pct(double v) { return printf_string("%+.1f%%", v); }
std::string threshold_text(double t) { return printf_string("±%.3g%%", t); }

std::string interval_words(const change_interval& i) {
  return printf_string("%.0f%% CI [%+.1f%%, %+.1f%%]", 100.0 * i.confidence, i.low_pct, i.high_pct);
}

// How many times narrower the interval must become to decide, if its centre stays: inside
// ±threshold (SAME) when the estimate is inside, clear of zero at the level the family needs
// (Bonferroni's, the strictest Holm step) when the estimate is beyond it.
std::optional<double> shrink_to_decide(const pair_row& r, double threshold_pct, double alpha) {
  const change_interval& i = *r.interval;
  const double e = i.estimate_pct;
  if (std::abs(e) < threshold_pct)
    return std::max((i.high_pct - e) / (threshold_pct - e), (e - i.low_pct) / (e + threshold_pct));
  if (std::abs(e) == threshold_pct || e == 0) return std::nullopt;
  const double level = alpha / static_cast<double>(r.family_size);
  const double widen = normal_quantile(1.0 - level / 2.0) / normal_quantile(1.0 - alpha / 2.0);
  return widen * (e < 0 ? (i.high_pct - e) / -e : (e - i.low_pct) / e);
}

// An interval's width goes as sqrt(1/n + 1/m): the equal count per side that narrows it enough.
std::optional<std::size_t> units_to_decide(const pair_row& r, double threshold_pct, double alpha) {
  if (!r.interval) return std::nullopt;
  const auto shrink = shrink_to_decide(r, threshold_pct, alpha);
  if (!shrink || !(*shrink > 0)) return std::nullopt;
  const double n = static_cast<double>(r.base_units.size()), m = static_cast<double>(r.candidate_units.size());
  const double per_side = 2.0 * *shrink * *shrink / (1.0 / n + 1.0 / m);
  if (per_side > 100000) return std::nullopt;
  std::size_t need = static_cast<std::size_t>(std::ceil(per_side));
  need = std::max(need, std::max(r.base_units.size(), r.candidate_units.size()) + 1);
  if (r.level == evidence_level::run) return need;  // Student's t reaches any level with 2 runs a side
  if (const auto reach = windows_to_reach(alpha / static_cast<double>(r.family_size)))
    need = std::max(need, reach->per_side);
  return need;
}

std::string decide_words(const pair_row& r) {
  const std::string unit = unit_name(r);
  if (r.to_decide) return "; about " + std::to_string(*r.to_decide) + " " + unit + " per side would likely decide it";
  return "; the change is too close to the threshold for more " + unit + " to decide it";
}

}  // namespace

namespace {

std::vector<double> units_of(const std::vector<double>& windows, const std::vector<int>& process,
                             const std::vector<int>& run, evidence_level level) {
  if (level == evidence_level::window) return windows;
  if (level == evidence_level::process) return process_medians(group_by_process(windows, process));
  // A run's summary: the median of its processes' medians.
  TB_ASSERT(run.size() == windows.size(), "the run level needs the run of every window");
  std::vector<int> runs(run);
  std::sort(runs.begin(), runs.end());
  runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
  std::vector<double> out;
  for (int id : runs) {
    std::vector<double> w;
    std::vector<int> p;
    for (std::size_t i = 0; i < windows.size(); ++i)
      if (run[i] == id) {
        w.push_back(windows[i]);
        p.push_back(process.empty() ? 0 : process[i]);
      }
    out.push_back(quantile(process_medians(group_by_process(w, p)), 0.5));
  }
  return out;
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double sd_of(const std::vector<double>& v, double mean) {
  if (v.size() < 2) return 0;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

// Student's t quantile: the t whose two-sided p is `p` (bisection on the distribution).
double t_quantile_two_sided(double p, double df) {
  double lo = 0, hi = 1e6;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_two_sided_p(mid, df) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// The run level: Student's t (pooled sd) between the logs of the sides' run summaries; with one
// candidate run, the prediction interval of a new run among the baseline's runs.
void run_level_test(pair_row& row, double alpha) {
  std::vector<double> lb, lc;
  for (double v : row.base_units) lb.push_back(std::log(v));
  for (double v : row.candidate_units) lc.push_back(std::log(v));
  const std::size_t n = lb.size(), m = lc.size();
  row.test = mann_whitney{};
  row.interval.reset();
  const double mb = mean_of(lb), mc = mean_of(lc);
  row.change_pct = 100.0 * std::expm1(mc - mb);
  if (n + m < 3 || n < 2) return;  // no spread to test against: p stays 1
  const t_test t = pooled_t_test(mc, sd_of(lc, mc), m, mb, sd_of(lb, mb), n);
  row.test.p = t.p;
  const double df = static_cast<double>(n + m - 2);
  const double pooled_sd = std::sqrt(((n - 1) * std::pow(sd_of(lb, mb), 2) + (m > 1 ? (m - 1) * std::pow(sd_of(lc, mc), 2) : 0.0)) / df);
  const double half = t_quantile_two_sided(alpha, df) * pooled_sd * std::sqrt(1.0 / n + 1.0 / m);
  change_interval i;
  i.confidence = 1.0 - alpha;
  i.estimate_pct = row.change_pct;
  i.low_pct = 100.0 * std::expm1(mc - mb - half);
  i.high_pct = 100.0 * std::expm1(mc - mb + half);
  row.interval = i;
}

}  // namespace

pair_row measure_pair(pair_row row, double alpha) {
  TB_ASSERT(!row.base.empty() && !row.candidate.empty(), "a pair without windows on both sides");
  row.base_units = units_of(row.base, row.base_process, row.base_run, row.level);
  row.candidate_units = units_of(row.candidate, row.candidate_process, row.candidate_run, row.level);
  if (row.level == evidence_level::run) {
    row.base_median = quantile(row.base_units, 0.5);
    row.candidate_median = quantile(row.candidate_units, 0.5);
    row.p_adjusted = 1;
    row.family_size = 1;
    run_level_test(row, alpha);
    row.p_adjusted = row.test.p;
    return row;
  }
  row.base_median = quantile(row.base_units, 0.5);
  row.candidate_median = quantile(row.candidate_units, 0.5);
  row.change_pct = 100.0 * (row.candidate_median / row.base_median - 1.0);
  row.test = mann_whitney_u(row.base_units, row.candidate_units);
  row.p_adjusted = row.test.p;
  row.family_size = 1;
  row.interval = interval_of_change(row.base_units, row.candidate_units, 1.0 - alpha);
  return row;
}

namespace {

// No outcome of n against m processes (windows) reaches alpha: say how many would.
bool too_few_units(pair_row& row, double alpha) {
  const std::size_t n = row.base_units.size(), m = row.candidate_units.size();
  if (row.level == evidence_level::run) {
    if (n >= 2) return false;
    row.result = verdict::ambiguous;
    row.reason = "too few runs (" + std::to_string(n) + " vs " + std::to_string(m) +
                 "): the spread between runs is unknown with one baseline run, so no test at the run level can decide "
                 "it; the processes of one run share its level and cannot stand in for runs";
    return true;
  }
  if (smallest_p(n, m) < alpha) return false;
  row.result = verdict::ambiguous;
  row.reason = std::string("too few ") + unit_name(row) + " (" + std::to_string(n) + " vs " + std::to_string(m) +
               "): the smallest p they can reach is " + format_p(smallest_p(n, m), alpha) + ", not below " +
               format_alpha(alpha);
  if (const auto reach = windows_to_reach(alpha)) {
    row.to_decide = reach->per_side;
    row.reason += "; " + std::to_string(reach->per_side) + " per side can reach p = " + format_p(reach->p, alpha);
  }
  if (row.level == evidence_level::process && (row.base.size() > n || row.candidate.size() > m))
    row.reason += " (their windows are not independent observations: they share their process's luck)";
  return true;
}

std::string significance_words(const pair_row& row, double alpha) {
  if (row.family_size < 2) return "p = " + format_p(row.test.p, alpha) + " < " + format_alpha(alpha);
  return "p = " + format_p(row.p_adjusted, alpha) + " < " + format_alpha(alpha) + " after Holm's correction over " +
         std::to_string(row.family_size) + " profiles (raw " + format_p(row.test.p, alpha) + ")";
}

std::string undecided_words(const pair_row& row, double threshold_pct, double alpha) {
  const std::string a = format_alpha(alpha);
  if (std::abs(row.change_pct) > threshold_pct && row.test.p < alpha)
    return "p = " + format_p(row.test.p, alpha) + " < " + a + ", but " + format_p(row.p_adjusted, alpha) + " >= " + a +
           " after Holm's correction over " + std::to_string(row.family_size) + " profiles";
  const double noise_pct = 100.0 * std::max(summarize(row.base_units).cv, summarize(row.candidate_units).cv);
  const char* noise = row.level == evidence_level::process ? ", process medians' cv %.2g%%)"
                      : row.level == evidence_level::run   ? ", run medians' cv %.2g%%)"
                                                           : ", noise cv %.2g%%)";
  return "the " + interval_words(*row.interval) + " reaches beyond " + threshold_text(threshold_pct) +
         " (p = " + format_p(row.test.p, alpha) + printf_string(noise, noise_pct);
}

}  // namespace

pair_row decide(pair_row row, double threshold_pct, double alpha) {
  row.to_decide.reset();
  if (too_few_units(row, alpha)) return row;
  if (row.p_adjusted < alpha && std::abs(row.change_pct) > threshold_pct) {
    row.result = row.change_pct > 0 ? verdict::faster : verdict::slower;
    row.reason =
        significance_words(row, alpha) + ", change " + pct(row.change_pct) + " beyond " + threshold_text(threshold_pct);
    return row;
  }
  row.result = verdict::ambiguous;
  if (!row.interval) {
    row.reason = "no interval of the change (a window rate is not positive)";
    return row;
  }
  const change_interval& i = *row.interval;
  if (i.low_pct >= -threshold_pct && i.high_pct <= threshold_pct) {
    row.result = verdict::same;
    row.reason = "the " + interval_words(i) + " lies within " + threshold_text(threshold_pct);
    return row;
  }
  row.to_decide = units_to_decide(row, threshold_pct, alpha);
  row.reason = undecided_words(row, threshold_pct, alpha) + decide_words(row);
  return row;
}

pair_row judge(pair_row row, double threshold_pct, double alpha) {
  return decide(measure_pair(std::move(row), alpha), threshold_pct, alpha);
}

void correct_family(std::vector<pair_row*> rows) {
  std::vector<double> p;
  for (const auto* r : rows) p.push_back(r->test.p);
  const auto adjusted = holm_adjust(p);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i]->p_adjusted = adjusted[i];
    rows[i]->family_size = rows.size();
  }
}

std::optional<std::string> family_warning(const std::vector<const pair_row*>& rows, double alpha) {
  if (rows.size() < 2) return std::nullopt;
  const double first_step = alpha / static_cast<double>(rows.size());
  double best = 1;
  for (const auto* r : rows)  // Student's t at the run level has no smallest p
    best = std::min(best, r->level == evidence_level::run ? 0.0
                                                          : smallest_p(r->base_units.size(), r->candidate_units.size()));
  if (best < first_step) return std::nullopt;
  const std::string unit = unit_name(*rows.front());
  std::string out = "with " + std::to_string(rows.size()) + " profiles, Holm's correction needs the smallest p below " +
                    format_alpha(alpha) + "/" + std::to_string(rows.size()) + " = " + format_p(first_step, alpha) +
                    "; these " + unit + " reach p = " + format_p(best, first_step) +
                    " at best, so no profile can be FASTER or SLOWER";
  if (const auto reach = windows_to_reach(first_step))
    out += "; " + std::to_string(reach->per_side) + " " + unit +
           " per side can reach p = " + format_p(reach->p, first_step);
  return out + " (or --no-family-correction)";
}

}  // namespace trainbench
