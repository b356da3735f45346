#include "trainbench/measure/change_points.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "trainbench/measure/t_test.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

struct span {
  std::size_t begin, end;  // [begin, end)
};

// The intervals between sorted change points inside [begin, end), empty ones left out.
std::vector<span> intervals_of(const std::vector<change_point>& cps, std::size_t begin, std::size_t end) {
  std::vector<span> out;
  std::size_t from = begin;
  for (const auto& c : cps) {
    if (c.index != from) out.push_back({from, c.index});
    from = c.index;
  }
  if (from != end) out.push_back({from, end});
  return out;
}

struct tester {
  const std::vector<double>& values;
  const std::vector<double>& sd_floor;
  const e_divisive_params& params;

  void side(span s, double& mean, double& sd) const {
    const auto n = static_cast<double>(s.end - s.begin);
    double sum = 0;
    for (std::size_t i = s.begin; i < s.end; ++i) sum += values[i];
    mean = sum / n;
    sd = 0;
    if (s.end - s.begin >= 2) {
      double ss = 0;
      for (std::size_t i = s.begin; i < s.end; ++i) ss += (values[i] - mean) * (values[i] - mean);
      sd = std::sqrt(ss / (params.sample_sd ? n - 1 : n));
    }
    if (params.spread_floor && !sd_floor.empty()) {
      double floor_ss = 0;
      for (std::size_t i = s.begin; i < s.end; ++i) floor_ss += sd_floor[i] * sd_floor[i];
      sd = std::max(sd, std::sqrt(floor_ss / n));
    }
  }

  change_point test(std::size_t index, double qhat, span left, span right) const {
    change_point c;
    c.index = index;
    c.qhat = qhat;
    c.n_before = left.end - left.begin;
    c.n_after = right.end - right.begin;
    side(left, c.mean_before, c.sd_before);
    side(right, c.mean_after, c.sd_after);
    c.p = pooled_t_test(c.mean_before, c.sd_before, c.n_before, c.mean_after, c.sd_after, c.n_after).p;
    return c;
  }

  // A candidate inside one of the intervals: test the two halves it splits that interval into.
  change_point test_split(std::size_t index, double qhat, const std::vector<span>& intervals) const {
    for (const auto& iv : intervals)
      if (iv.begin < index && index < iv.end) return test(index, qhat, {iv.begin, index}, {index, iv.end});
    TB_ASSERT(false, "a change point candidate outside every interval");
  }

  // An existing change point: test the intervals on either side of it.
  change_point test_between(const change_point& c, const std::vector<span>& intervals) const {
    for (std::size_t i = 0; i + 1 < intervals.size(); ++i)
      if (intervals[i].end == c.index) return test(c.index, c.qhat, intervals[i], intervals[i + 1]);
    TB_ASSERT(false, "a change point that is no interval's end");
  }
};

// Q-hat over one window: pair distances and their column prefix sums, so every (tau, kappa)
// costs O(1).
class q_hat {
 public:
  q_hat(const std::vector<double>& values, std::size_t begin, std::size_t end) : begin_(begin), n_(end - begin) {
    prefix_.assign((n_ + 1) * n_, 0.0);
    for (std::size_t c = 0; c < n_; ++c)
      for (std::size_t r = 0; r < n_; ++r)
        prefix_[(r + 1) * n_ + c] = prefix_[r * n_ + c] + std::fabs(values[begin + r] - values[begin + c]);
  }

  // The (tau, kappa) maximising Q over [begin, end) as numpy's argmax finds it in Otava's matrix:
  // row tau, column kappa, the entries below the diagonal zero, the first maximum in row order.
  // Only splits that leave at least min_segment values on either side are candidates (with
  // min_segment 1, every split, as Otava); nullopt when there is none.
  std::optional<std::pair<std::size_t, double>> best(std::size_t begin, std::size_t end,
                                                     std::size_t min_segment) const {
    const std::size_t s = begin - begin_, e = end - begin_, size = e - s - 1;
    std::size_t best_tau = s + 1;
    double best_q = 0;
    bool first = true;
    for (std::size_t i = 0; i < size; ++i) {
      const std::size_t tau = s + 1 + i;
      if (tau - s < min_segment || e - tau < min_segment) continue;
      const double within_left = pairs_within(s, tau);
      double cross = 0, within_right = 0;
      for (std::size_t j = 0; j < size; ++j) {
        double q = 0;
        if (j >= i) {
          const std::size_t kappa = s + 2 + j;
          const std::size_t added = kappa - 1;  // the value kappa brings into the right side
          cross += column(added, s, tau);
          within_right += column(added, tau, added);
          const auto n = static_cast<double>(tau - s), m = static_cast<double>(kappa - tau);
          q = 2 / (m + n) * cross;
          if (n > 1) q -= 2 * m / ((m + n) * (n - 1)) * within_left;
          if (m > 1) q -= 2 * n / ((m + n) * (m - 1)) * within_right;
        }
        if (first || q > best_q) {
          best_q = q;
          best_tau = tau;
          first = false;
        }
      }
    }
    if (first) return std::nullopt;
    return std::make_pair(begin_ + best_tau, best_q);
  }

 private:
  // The sum of distances from value c to values [from, to) (window positions).
  double column(std::size_t c, std::size_t from, std::size_t to) const {
    return prefix_[to * n_ + c] - prefix_[from * n_ + c];
  }
  double pairs_within(std::size_t from, std::size_t to) const {
    double sum = 0;
    for (std::size_t c = from + 1; c < to; ++c) sum += column(c, from, c);
    return sum;
  }

  std::size_t begin_, n_;
  std::vector<double> prefix_;  // prefix_[r * n + c]: distances from value c to values [0, r)
};

// E-Divisive inside one window: split at the best candidate while the t-test passes `level`.
std::vector<change_point> divide_window(const tester& t, std::size_t begin, std::size_t end, double level) {
  const q_hat q(t.values, begin, end);
  std::vector<change_point> found;
  while (true) {
    const auto intervals = intervals_of(found, begin, end);
    bool any = false;
    std::pair<std::size_t, double> best{0, 0};
    for (const auto& iv : intervals) {
      if (iv.end - iv.begin < std::max<std::size_t>(2, 2 * t.params.min_segment)) continue;
      const auto c = q.best(iv.begin, iv.end, t.params.min_segment);
      if (!c) continue;
      if (!any || c->second > best.second) best = *c;
      any = true;
    }
    if (!any) break;
    const change_point c = t.test_split(best.first, best.second, intervals);
    if (!(c.p <= level)) break;
    found.push_back(c);
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  }
  return found;
}

std::vector<change_point> split(const tester& t, std::size_t window, double level) {
  const std::size_t n = t.values.size(), step = window / 2;
  std::vector<change_point> weak;
  std::size_t start = 0;
  while (start < n) {
    const std::size_t end = std::min(start + window, n);
    const auto found = divide_window(t, start, end, level);
    const std::size_t last = found.empty() ? 0 : found.back().index;
    start = std::max(last, start + step);
    for (const auto& c : found)
      if (std::none_of(weak.begin(), weak.end(), [&](const auto& w) { return w.index == c.index; })) weak.push_back(c);
  }
  std::sort(weak.begin(), weak.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  const auto intervals = intervals_of(weak, 0, n);
  for (auto& c : weak) c = t.test_between(c, intervals);
  return weak;
}

std::vector<change_point> merge(const tester& t, std::vector<change_point> cps) {
  const e_divisive_params& p = t.params;
  const auto short_level = [&](const change_point& c) {
    return std::min(c.n_before, c.n_after) < p.min_segment;
  };
  while (!cps.empty()) {
    auto weakest = std::max_element(cps.begin(), cps.end(), [](const auto& a, const auto& b) { return a.p < b.p; });
    // A change point with a level shorter than min_segment on a side goes first, the weakest of those.
    auto too_short = cps.end();
    for (auto it = cps.begin(); it != cps.end(); ++it)
      if (short_level(*it) && (too_short == cps.end() || it->p > too_short->p)) too_short = it;
    if (too_short != cps.end()) {
      weakest = too_short;
    } else if (weakest->p < p.max_p) {
      weakest = std::min_element(cps.begin(), cps.end(),
                                 [](const auto& a, const auto& b) { return a.magnitude() < b.magnitude(); });
      if (weakest->magnitude() > p.min_magnitude) return cps;
    }
    const auto at = static_cast<std::size_t>(weakest - cps.begin());
    cps.erase(weakest);
    const auto intervals = intervals_of(cps, 0, t.values.size());
    const auto retest = [&](std::size_t i) {
      if (i < cps.size()) cps[i] = t.test_between(cps[i], intervals);
    };
    if (p.merge_neighbours) {
      if (at > 0) retest(at - 1);
      retest(at);
    } else {
      retest(at);
      retest(at + 1);
    }
  }
  return cps;
}

}  // namespace

double change_point::forward_change() const { return mean_before == 0 ? 0 : mean_after / mean_before - 1; }

double change_point::magnitude() const {
  const double backward = mean_after == 0 ? 0 : mean_before / mean_after - 1;
  return std::max(std::fabs(forward_change()), std::fabs(backward));
}

e_divisive_params otava_compatible(e_divisive_params p) {
  p.sample_sd = false;
  p.merge_neighbours = false;
  p.spread_floor = false;
  p.min_segment = 1;
  return p;
}

double first_pass_p(double max_p) {
  if (max_p < 0.05) return max_p * 10;
  if (max_p < 0.5) return max_p * 2;
  return max_p;
}

change_point_result e_divisive(const std::vector<double>& values, const std::vector<double>& sd_floor,
                               const e_divisive_params& params) {
  TB_ASSERT(params.window >= 2, "E-Divisive needs a window of at least 2 values");
  TB_ASSERT(sd_floor.empty() || sd_floor.size() == values.size(), "one sd floor per value");
  const tester t{values, sd_floor, params};
  change_point_result out;
  if (values.size() < 2) return out;
  out.weak = split(t, params.window, first_pass_p(params.max_p));
  out.strong = merge(t, out.weak);
  return out;
}

std::string describe(const e_divisive_params& p) {
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "window=%zu max_p=%.17g min_magnitude=%.17g sd=%s merge=%s spread_floor=%s min_segment=%zu", p.window,
                p.max_p, p.min_magnitude, p.sample_sd ? "sample" : "population",
                p.merge_neighbours ? "both-neighbours" : "otava-0.8", p.spread_floor ? "on" : "off", p.min_segment);
  return buf;
}

}  // namespace trainbench
