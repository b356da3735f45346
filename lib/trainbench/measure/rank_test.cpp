#include "trainbench/measure/rank_test.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "trainbench/measure/stats.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

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

double binomial(std::size_t n, std::size_t k) {
  double out = 1;
  for (std::size_t i = 1; i <= k; ++i) out = out * static_cast<double>(n - k + i) / static_cast<double>(i);
  return std::round(out);  // exact: every value up to C(40, 20) is an integer below 2^53
}

// The pooled sample sorted, as groups of equal values: how many there are and how many of
// them belong to the first sample.
struct tie_group {
  std::size_t size = 0, first = 0;
};

std::vector<tie_group> tie_groups(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<std::pair<double, int>> pooled;
  for (double v : a) pooled.push_back({v, 0});
  for (double v : b) pooled.push_back({v, 1});
  std::sort(pooled.begin(), pooled.end());
  std::vector<tie_group> out;
  for (std::size_t i = 0; i < pooled.size();) {
    tie_group g;
    for (; i + g.size < pooled.size() && pooled[i + g.size].first == pooled[i].first; ++g.size)
      if (pooled[i + g.size].second == 0) ++g.first;
    i += g.size;
    out.push_back(g);
  }
  return out;
}

// Twice a group's midrank, an integer: the group after `before` values holds ranks before + 1 .. before + size.
std::size_t doubled_midrank(std::size_t before, std::size_t size) { return 2 * before + size + 1; }

// Exact two-sided p of the first sample's rank sum, over every way to choose which n of the
// pooled values are the first sample's, the tied groups kept as they are. counts[k][s]: the
// ways to place k of the first sample among the groups seen so far with doubled rank sum s.
double exact_tied_p(const std::vector<tie_group>& groups, std::size_t n, std::size_t observed_doubled_sum) {
  std::size_t total_n = 0;
  for (const auto& g : groups) total_n += g.size;
  const std::size_t max_sum = n * (2 * total_n - n + 1);  // twice the sum of the n largest ranks
  std::vector<std::vector<double>> counts(n + 1, std::vector<double>(max_sum + 1, 0.0));
  counts[0][0] = 1;
  std::size_t before = 0;
  std::vector<double> ways;
  for (const auto& g : groups) {
    const std::size_t r2 = doubled_midrank(before, g.size);
    ways.clear();
    for (std::size_t j = 0; j <= g.size; ++j) ways.push_back(binomial(g.size, j));
    // In place, largest k first: counts[k - j] for j >= 1 still hold the previous groups' counts.
    for (std::size_t k = std::min(n, before + g.size); k >= 1; --k) {
      const std::size_t top = std::min(max_sum, k * r2);  // no k ranks seen so far sum higher
      for (std::size_t s = top + 1; s-- > 0;) {
        double c = counts[k][s];
        for (std::size_t j = 1; j <= g.size && j <= k && j * r2 <= s; ++j) c += counts[k - j][s - j * r2] * ways[j];
        counts[k][s] = c;
      }
    }
    before += g.size;
  }
  double below = 0, above = 0, total = 0;
  for (std::size_t s = 0; s <= max_sum; ++s) {
    const double c = counts[n][s];
    total += c;
    if (s <= observed_doubled_sum) below += c;
    if (s >= observed_doubled_sum) above += c;
  }
  TB_ASSERT(total > 0, "no arrangement of the pooled windows");
  return std::min(1.0, 2.0 * std::min(below, above) / total);
}

}  // namespace

double normal_quantile(double q) {
  TB_ASSERT(q > 0 && q < 1, "normal quantile outside (0, 1)");
  double lo = -40, hi = 40;  // bisection on the survival function: slow, exact to the last bits
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = (lo + hi) / 2;
    (1.0 - normal_sf(mid) < q ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

double smallest_p(std::size_t n, std::size_t m) {
  if (n == 0 || m == 0) return 1.0;
  if (n > exact_limit || m > exact_limit) {
    const double nm = static_cast<double>(n * m);
    const double z = (nm / 2.0 - 0.5) / std::sqrt(nm * static_cast<double>(n + m + 1) / 12.0);
    return std::min(1.0, 2.0 * normal_sf(z));
  }
  return std::min(1.0, 2.0 / binomial(n + m, n));  // all of one sample above all of the other
}

std::optional<windows_reach> windows_to_reach(double alpha) {
  for (std::size_t k = 2; k <= 1000; ++k) {
    const double p = smallest_p(k, k);
    if (p < alpha) return windows_reach{k, p};
  }
  return std::nullopt;
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
    // A tail can equal the target exactly (11/220 = 0.05 for 3 vs 9 at 90%), which 1 - 0.9 misses by an ulp.
    while (k < dist.size() && (below + dist[k]) / total <= tail * (1 + 1e-9)) below += dist[k++];
    return k;
  }
  const double z = normal_quantile(1.0 - tail);
  const double nm = static_cast<double>(n * m);
  const double k = std::floor(nm / 2.0 - z * std::sqrt(nm * static_cast<double>(n + m + 1) / 12.0));
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
  const auto groups = tie_groups(a, b);
  std::size_t before = 0, doubled_sum = 0;
  double tie_term = 0;
  for (const auto& g : groups) {
    doubled_sum += g.first * doubled_midrank(before, g.size);
    const double t = static_cast<double>(g.size);
    tie_term += t * t * t - t;
    out.ties = out.ties || g.size > 1;
    before += g.size;
  }
  const double nn = static_cast<double>(n), mm = static_cast<double>(m);
  out.u = static_cast<double>(doubled_sum) / 2.0 - nn * (nn + 1) / 2.0;
  if (n <= exact_limit && m <= exact_limit) {
    out.p = exact_tied_p(groups, n, doubled_sum);
    out.exact = true;
    return out;
  }
  const double n_all = nn + mm;
  const double var = nn * mm / 12.0 * ((n_all + 1) - tie_term / (n_all * (n_all - 1)));
  if (var <= 0) {
    out.p = 1.0;  // every window has the same rate
    return out;
  }
  const double z = (std::abs(out.u - nn * mm / 2.0) - 0.5) / std::sqrt(var);
  out.p = std::min(1.0, 2.0 * normal_sf(std::max(0.0, z)));
  return out;
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return p[x] < p[y]; });
  std::vector<double> out(p.size());
  double running = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const double scaled = std::min(1.0, static_cast<double>(p.size() - i) * p[order[i]]);
    running = std::max(running, scaled);
    out[order[i]] = running;
  }
  return out;
}

}  // namespace trainbench
