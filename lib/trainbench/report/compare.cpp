#include "trainbench/report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "trainbench/measure/stats.hpp"
#include "trainbench/report/report.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t exact_limit = 20;

// Number of ways to get each U value for samples of sizes n and m (no ties).
std::vector<double> u_distribution(std::size_t n, std::size_t m) {
  // counts[i][j][u]: arrangements of i values of the first and j of the second sample with statistic u.
  std::vector<std::vector<std::vector<double>>> c(n + 1, std::vector<std::vector<double>>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) {
    for (std::size_t j = 0; j <= m; ++j) {
      c[i][j].assign(i * j + 1, 0.0);
      if (i == 0 || j == 0) {
        c[i][j][0] = 1;
        continue;
      }
      // The largest value belongs to the first sample (it beats all j others) or to the second.
      for (std::size_t u = 0; u <= i * j; ++u) {
        if (u >= j && u - j < c[i - 1][j].size()) c[i][j][u] += c[i - 1][j][u - j];
        if (u < c[i][j - 1].size()) c[i][j][u] += c[i][j - 1][u];
      }
    }
  }
  return c[n][m];
}

double normal_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

}  // namespace

double smallest_p(std::size_t n, std::size_t m) {
  if (n == 0 || m == 0) return 1.0;
  if (n > exact_limit || m > exact_limit) return 0.0;
  const auto dist = u_distribution(n, m);
  double total = 0;
  for (double d : dist) total += d;
  return std::min(1.0, 2.0 * dist[0] / total);
}

namespace {

// How many of the sorted pairwise differences to cut from each end: the largest k with
// P(U < k) <= (1 - confidence) / 2 under the null. 0 when not even the extremes qualify.
std::size_t interval_cut(std::size_t n, std::size_t m, double confidence) {
  const double tail = (1.0 - confidence) / 2.0;
  if (n <= exact_limit && m <= exact_limit) {
    const auto dist = u_distribution(n, m);
    double total = 0;
    for (double d : dist) total += d;
    std::size_t k = 0;
    double below = 0;  // P(U <= k - 1) * total
    while (k < dist.size() && (below + dist[k]) / total <= tail) below += dist[k++];
    return k;
  }
  // Normal approximation: z from the upper tail by bisection on the survival function.
  double lo = 0, hi = 10;
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    (normal_sf(mid) > tail ? lo : hi) = mid;
  }
  const double nm = static_cast<double>(n * m);
  const double k = std::floor(nm / 2.0 - lo * std::sqrt(nm * static_cast<double>(n + m + 1) / 12.0));
  return k < 1 ? 0 : static_cast<std::size_t>(k);
}

double pct_of_log(double d) { return 100.0 * std::expm1(d); }

}  // namespace

std::optional<change_interval> interval_of_change(const std::vector<double>& base, const std::vector<double>& candidate,
                                                  double confidence) {
  const std::size_t k = interval_cut(base.size(), candidate.size(), confidence);
  if (k == 0) return std::nullopt;
  std::vector<double> d;
  d.reserve(base.size() * candidate.size());
  for (double c : candidate)
    for (double b : base) {
      if (c <= 0 || b <= 0) return std::nullopt;
      d.push_back(std::log(c) - std::log(b));
    }
  std::sort(d.begin(), d.end());
  change_interval out;
  out.confidence = confidence;
  out.estimate_pct = pct_of_log(quantile(d, 0.5));
  out.low_pct = pct_of_log(d[k - 1]);
  out.high_pct = pct_of_log(d[d.size() - k]);
  return out;
}

mann_whitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  mann_whitney out;
  const std::size_t n = a.size(), m = b.size();
  if (n == 0 || m == 0) return out;
  // Ranks of the pooled sample, ties get the average rank.
  std::vector<std::pair<double, int>> pooled;
  for (double v : a) pooled.push_back({v, 0});
  for (double v : b) pooled.push_back({v, 1});
  std::sort(pooled.begin(), pooled.end());
  double rank_sum_a = 0, tie_term = 0;
  bool ties = false;
  for (std::size_t i = 0; i < pooled.size();) {
    std::size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double avg_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    const double t = static_cast<double>(j - i);
    if (t > 1) ties = true;
    tie_term += t * t * t - t;
    for (std::size_t k = i; k < j; ++k)
      if (pooled[k].second == 0) rank_sum_a += avg_rank;
    i = j;
  }
  const double nn = static_cast<double>(n), mm = static_cast<double>(m);
  out.u = rank_sum_a - nn * (nn + 1) / 2.0;
  const double mean_u = nn * mm / 2.0;
  if (!ties && n <= exact_limit && m <= exact_limit) {
    const auto dist = u_distribution(n, m);
    double total = 0, tail = 0;
    for (double d : dist) total += d;
    const double u_small = std::min(out.u, nn * mm - out.u);
    for (std::size_t u = 0; u < dist.size() && static_cast<double>(u) <= u_small + 1e-9; ++u) tail += dist[u];
    out.p = std::min(1.0, 2.0 * tail / total);
    out.exact = true;
    return out;
  }
  const double n_all = nn + mm;
  const double var = nn * mm / 12.0 * ((n_all + 1) - tie_term / (n_all * (n_all - 1)));
  if (var <= 0) {
    out.p = 1.0;
    return out;
  }
  const double z = (std::abs(out.u - mean_u) - 0.5) / std::sqrt(var);
  out.p = std::min(1.0, 2.0 * normal_sf(std::max(0.0, z)));
  return out;
}

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

pair_row judge(pair_row row, double threshold_pct, double alpha) {
  row.base_median = quantile(row.base, 0.5);
  row.candidate_median = quantile(row.candidate, 0.5);
  row.change_pct = 100.0 * (row.candidate_median / row.base_median - 1.0);
  row.test = mann_whitney_u(row.base, row.candidate);
  row.interval = interval_of_change(row.base, row.candidate, 1.0 - alpha);
  const double noise_pct = 100.0 * std::max(summarize(row.base).cv, summarize(row.candidate).cv);
  const bool big = std::abs(row.change_pct) > threshold_pct;
  char buf[200];
  if (smallest_p(row.base.size(), row.candidate.size()) >= alpha) {
    row.result = verdict::ambiguous;
    std::snprintf(buf, sizeof buf, "too few repeats (%zu vs %zu): no result can reach p < %.3g; raise measure.repeats",
                  row.base.size(), row.candidate.size(), alpha);
  } else if (row.test.p < alpha && big) {
    row.result = row.change_pct > 0 ? verdict::faster : verdict::slower;
    std::snprintf(buf, sizeof buf, "p = %.3g < %.3g and |change| > %.3g%%", row.test.p, alpha, threshold_pct);
  } else if (row.test.p < alpha) {
    row.result = verdict::same;
    std::snprintf(buf, sizeof buf, "significant (p = %.3g) but within the %.3g%% threshold", row.test.p, threshold_pct);
  } else if (big || noise_pct > threshold_pct) {
    row.result = verdict::ambiguous;
    std::snprintf(buf, sizeof buf, "too noisy: p = %.3g, noise (cv) %.2g%% vs threshold %.3g%%", row.test.p, noise_pct,
                  threshold_pct);
  } else {
    row.result = verdict::same;
    std::snprintf(buf, sizeof buf, "p = %.3g, change and noise within %.3g%%", row.test.p, threshold_pct);
  }
  row.reason = buf;
  return row;
}

namespace {

std::vector<double> rates_of(const json& report) {
  std::vector<double> out;
  for (const auto& r : report.at("results").at("repeats")) out.push_back(r.at("samples_per_s").get<double>());
  return out;
}

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

}  // namespace

comparison compare_reports(const std::vector<json>& base, const std::vector<json>& candidate, double threshold_pct,
                           double alpha) {
  comparison out;
  std::vector<bool> used(candidate.size(), false);
  double log_sum = 0;
  int log_n = 0;
  for (const auto& b : base) {
    std::optional<std::size_t> hit;
    std::string how = "hash";
    for (std::size_t i = 0; i < candidate.size() && !hit; ++i)
      if (!used[i] && candidate[i].at("profile").at("hash") == b.at("profile").at("hash")) hit = i;
    for (std::size_t i = 0; i < candidate.size() && !hit; ++i) {
      if (!used[i] && name_of(candidate[i]) == name_of(b) &&
          candidate[i].at("profile").value("workload_hash", "") == b.at("profile").value("workload_hash", "")) {
        hit = i;
        how = "name";
        out.warnings.push_back("'" + name_of(b) +
                               "': profile hashes differ only in report path or measure counts; matched by name");
      }
    }
    if (!hit) {
      out.only_base.push_back(name_of(b));
      continue;
    }
    used[*hit] = true;
    const json& c = candidate[*hit];
    for (const char* key : {"gpu", "driver", "libtorch", "build_type"}) {
      if (context_key(b, key) != context_key(c, key))
        out.warnings.push_back("'" + name_of(b) + "': " + key + " differs: '" + context_key(b, key) + "' vs '" +
                               context_key(c, key) + "'");
    }
    warn_partial(b, "base", out.warnings);
    warn_partial(c, "candidate", out.warnings);
    pair_row row;
    row.name = name_of(b);
    row.match = how;
    row.base = rates_of(b);
    row.candidate = rates_of(c);
    if (row.base.empty() || row.candidate.empty()) {
      row.result = verdict::ambiguous;
      row.reason =
          "a side has no measured windows (status " + b.value("status", "?") + " / " + c.value("status", "?") + ")";
      out.rows.push_back(row);
      continue;
    }
    row = judge(row, threshold_pct, alpha);
    log_sum += std::log(row.candidate_median / row.base_median);
    ++log_n;
    out.rows.push_back(row);
  }
  for (std::size_t i = 0; i < candidate.size(); ++i)
    if (!used[i]) out.only_candidate.push_back(name_of(candidate[i]));
  if (log_n) out.geomean_ratio = std::exp(log_sum / log_n);
  return out;
}

std::vector<json> read_reports(const std::string& file_or_folder) {
  std::vector<fs::path> files;
  if (fs::is_directory(file_or_folder)) {
    for (const auto& e : fs::directory_iterator(file_or_folder))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return natural_less(a.string(), b.string()); });
    if (files.empty()) throw input_error("'" + file_or_folder + "': no *.json reports in this folder");
  } else {
    files.push_back(file_or_folder);
  }
  std::vector<json> out;
  for (const auto& f : files) {
    json j;
    try {
      j = json::parse(read_text_file(f));
    } catch (const json::exception& e) {
      throw input_error("'" + f.string() + "': not a JSON report: " + e.what());
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
    out.push_back(std::move(j));
  }
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

}  // namespace

std::string format_comparison(const comparison& c, const std::string& format) {
  char buf[512];
  std::string out;
  if (format == "json") {
    json j = {{"rows", json::array()},
              {"only_base", c.only_base},
              {"only_candidate", c.only_candidate},
              {"warnings", c.warnings},
              {"geomean_ratio", c.geomean_ratio ? json(*c.geomean_ratio) : json(nullptr)}};
    for (const auto& r : c.rows)
      j["rows"].push_back({{"name", r.name},
                           {"match", r.match},
                           {"base_median", r.base_median},
                           {"candidate_median", r.candidate_median},
                           {"change_pct", r.change_pct},
                           {"interval", interval_json(r.interval)},
                           {"u", r.test.u},
                           {"p", r.test.p},
                           {"verdict", to_string(r.result)},
                           {"reason", r.reason}});
    return j.dump(2) + "\n";
  }
  const bool md = format == "markdown";
  for (const auto& w : c.warnings) out += (md ? "> **warning:** " : "WARNING: ") + w + "\n";
  if (!c.warnings.empty()) out += "\n";
  const std::string ci = interval_title(c);
  if (md) {
    out += "| profile | base samples/s | candidate samples/s | change | " + ci +
           " | p | verdict |\n|---|---:|---:|---:|---:|---:|---|\n";
  } else {
    std::snprintf(buf, sizeof buf, "%-28s %14s %14s %9s %18s %8s  %s\n", "profile", "base", "candidate", "change",
                  ci.c_str(), "p", "verdict");
    out += buf;
  }
  for (const auto& r : c.rows) {
    const std::string range = interval_text(r.interval);
    if (md)
      std::snprintf(buf, sizeof buf, "| %s | %.1f | %.1f | %+.1f%% | %s | %.3g | **%s** (%s) |\n", r.name.c_str(),
                    r.base_median, r.candidate_median, r.change_pct, range.c_str(), r.test.p, to_string(r.result),
                    r.reason.c_str());
    else
      std::snprintf(buf, sizeof buf, "%-28s %14.1f %14.1f %+8.1f%% %18s %8.3g  %s (%s)\n", r.name.c_str(),
                    r.base_median, r.candidate_median, r.change_pct, range.c_str(), r.test.p, to_string(r.result),
                    r.reason.c_str());
    out += buf;
  }
  if (c.geomean_ratio) {
    if (md)
      std::snprintf(buf, sizeof buf, "| geometric mean | | | %+.1f%% | | | |\n", 100.0 * (*c.geomean_ratio - 1));
    else
      std::snprintf(buf, sizeof buf, "%-28s %14s %14s %+8.1f%%\n", "geometric mean", "", "",
                    100.0 * (*c.geomean_ratio - 1));
    out += buf;
  }
  for (const auto& n : c.only_base) out += (md ? "- only in base: " : "only in base: ") + n + "\n";
  for (const auto& n : c.only_candidate) out += (md ? "- only in candidate: " : "only in candidate: ") + n + "\n";
  return out;
}

int compare_command(const compare_request& req) {
  if (req.threshold_pct < 0) throw input_error("--threshold must be >= 0");
  if (req.alpha <= 0 || req.alpha >= 1) throw input_error("--alpha must be in (0, 1)");
  const comparison c =
      compare_reports(read_reports(req.base), read_reports(req.candidate), req.threshold_pct, req.alpha);
  std::cout << format_comparison(c, req.format);
  for (const auto& r : c.rows)
    if (r.result == verdict::slower) return exit_code::failed;
  return exit_code::ok;
}

}  // namespace trainbench
