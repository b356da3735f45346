// history show's trend chart (SVG) and index.html: self-contained, nothing fetched.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "trainbench/history/history.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {

namespace {

constexpr double width = 960, plot_height = 240, left = 72, right = 24, top = 46;
constexpr std::size_t env_labels_max = 8;

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", v);
  return buf;
}

struct scale {
  double lo = 0, hi = 1;
  std::size_t n = 1;
  double x(std::size_t i) const {
    return n < 2 ? left + (width - left - right) / 2
                 : left + (width - left - right) * static_cast<double>(i) / static_cast<double>(n - 1);
  }
  double y(double v) const { return top + plot_height * (1 - (v - lo) / (hi - lo)); }
};

scale scale_of(const series_view& v) {
  scale s;
  s.n = v.runs.size();
  bool any = false;
  for (const auto& r : v.runs) {
    if (!counts(r)) continue;
    const double lo = r.q1.value_or(*r.median), hi = r.q3.value_or(*r.median);
    s.lo = any ? std::min(s.lo, lo) : lo;
    s.hi = any ? std::max(s.hi, hi) : hi;
    any = true;
  }
  if (!any || s.hi <= s.lo) {
    const double mid = any ? s.lo : 1;
    s.lo = mid * 0.95;
    s.hi = mid * 1.05 + (mid == 0 ? 1 : 0);
  }
  const double pad = 0.08 * (s.hi - s.lo);
  s.lo -= pad;
  s.hi += pad;
  return s;
}

std::size_t index_of(const series_view& v, const std::string& id) {
  for (std::size_t i = 0; i < v.runs.size(); ++i)
    if (v.runs[i].id == id) return i;
  return 0;
}

void axes(std::ostringstream& o, const scale& s) {
  for (int t = 0; t <= 4; ++t) {
    const double val = s.lo + (s.hi - s.lo) * t / 4.0, y = s.y(val);
    o << "<line x1='" << left << "' y1='" << num(y) << "' x2='" << width - right << "' y2='" << num(y)
      << "' stroke='#e5e5e5'/>\n<text x='" << left - 6 << "' y='" << num(y + 4) << "' text-anchor='end'>" << num(val)
      << "</text>\n";
  }
  o << "<text x='14' y='" << num(top + plot_height / 2) << "' transform='rotate(-90 14 " << num(top + plot_height / 2)
    << ")' text-anchor='middle'>samples/s (median, IQR)</text>\n";
  o << "<line x1='" << left << "' y1='" << top + plot_height << "' x2='" << width - right << "' y2='"
    << top + plot_height << "' stroke='#999'/>\n";
}

// The mean of each stretch between change points, as a line over its runs.
void segment_means(std::ostringstream& o, const series_view& v, const scale& s) {
  std::size_t from = 0;
  auto draw = [&](std::size_t to, double mean) {
    o << "<line x1='" << num(s.x(from)) << "' y1='" << num(s.y(mean)) << "' x2='" << num(s.x(to)) << "' y2='"
      << num(s.y(mean)) << "' stroke='#f0a030' stroke-width='2' opacity='0.8'/>\n";
  };
  for (const auto& c : v.change_points.points) {
    const std::size_t at = index_of(v, c.run_id);
    draw(at == 0 ? 0 : at - 1, c.mean_before);
    from = at;
  }
  if (!v.change_points.points.empty()) draw(v.runs.size() - 1, v.change_points.points.back().mean_after);
}

void runs(std::ostringstream& o, const series_view& v, const scale& s) {
  const double r = v.runs.size() > 300 ? 1.2 : 2.5;
  for (std::size_t i = 0; i < v.runs.size(); ++i) {
    const auto& run = v.runs[i];
    const double x = s.x(i);
    if (!counts(run)) {
      const double y = top + plot_height - 6;
      o << "<path d='M" << num(x - 3) << " " << num(y - 3) << "l6 6m0 -6l-6 6' stroke='#c0392b'><title>"
        << xml_escape(run.commit.substr(0, 10) + ": " + run.status) << "</title></path>\n";
      continue;
    }
    if (run.q1 && run.q3)
      o << "<line x1='" << num(x) << "' y1='" << num(s.y(*run.q1)) << "' x2='" << num(x) << "' y2='"
        << num(s.y(*run.q3)) << "' stroke='#8fb3d9'/>\n";
    o << "<circle cx='" << num(x) << "' cy='" << num(s.y(*run.median)) << "' r='" << r << "' fill='#1f5f9f'><title>"
      << xml_escape(run.commit.substr(0, 10) + " " + run.time + ": " + num(*run.median) + " samples/s")
      << "</title></circle>\n";
  }
}

void change_points(std::ostringstream& o, const series_view& v, const scale& s) {
  for (const auto& c : v.change_points.points) {
    const std::size_t at = index_of(v, c.run_id);
    const double x = at == 0 ? s.x(0) : (s.x(at - 1) + s.x(at)) / 2;
    const char* colour = c.change_pct < 0 ? "#c0392b" : "#1e8449";
    o << "<line x1='" << num(x) << "' y1='" << top - 4 << "' x2='" << num(x) << "' y2='" << top + plot_height
      << "' stroke='" << colour << "' stroke-dasharray='4 3'/>\n";
    o << "<text x='" << num(x + 3) << "' y='" << top - 8 << "' fill='" << colour << "' font-weight='bold'>"
      << pct(c.change_pct) << "</text>\n";
  }
}

// Environment changes: a numbered marker under the axis, and the legend below the chart.
std::vector<std::string> environment_marks(std::ostringstream& o, const series_view& v, const scale& s) {
  std::vector<std::string> legend;
  std::size_t shown = 0, total = 0;
  for (std::size_t i = 0; i < v.runs.size(); ++i) {
    if (v.env_changes[i].empty()) continue;
    ++total;
    if (shown == env_labels_max) continue;
    ++shown;
    const double x = s.x(i), y = top + plot_height + 14;
    o << "<path d='M" << num(x) << " " << top + plot_height + 2 << "l-4 7h8z' fill='#7d3c98'/>\n<text x='" << num(x)
      << "' y='" << num(y + 8) << "' text-anchor='middle' fill='#7d3c98'>" << shown << "</text>\n";
    legend.push_back(std::to_string(shown) + ": " + v.runs[i].commit.substr(0, 10) + " " +
                     join(v.env_changes[i], ", "));
  }
  if (total > shown)
    legend.push_back("and " + std::to_string(total - shown) + " more environment changes (history show --format json)");
  return legend;
}

}  // namespace

std::string history_chart_svg(const series_view& v) {
  const scale s = scale_of(v);
  std::ostringstream body;
  axes(body, s);
  segment_means(body, v, s);
  runs(body, v, s);
  change_points(body, v, s);
  const auto legend = environment_marks(body, v, s);
  const double height = top + plot_height + 40 + 16.0 * static_cast<double>(legend.size());
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height << "' viewBox='0 0 "
    << width << " " << height << "' font-family='sans-serif' font-size='11'>\n";
  o << "<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << left << "' y='16' font-size='13' font-weight='bold'>"
    << xml_escape(v.series.profile_name + "  [" + v.series.machine_class + "]  branch " + v.branch) << "</text>\n";
  o << "<text x='" << left << "' y='30' fill='#555'>"
    << xml_escape(std::to_string(v.runs.size()) +
                  " runs, oldest left. Dot: median; bar: IQR; orange: mean between change points; dashed: "
                  "change point; x: failed run; triangle: environment change")
    << "</text>\n";
  o << body.str();
  double y = top + plot_height + 40;
  for (const auto& line : legend) {
    o << "<text x='" << left << "' y='" << num(y) << "' fill='#7d3c98'>" << xml_escape(line) << "</text>\n";
    y += 16;
  }
  o << "</svg>\n";
  return o.str();
}

std::string history_index_html(const std::vector<series_view>& views, const std::string& where) {
  std::ostringstream o;
  o << "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>trainbench history</title>\n<style>"
       "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin-bottom:24px}"
       "td,th{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left;font-size:13px}"
       ".down{color:#c0392b}.up{color:#1e8449}section{margin-bottom:32px}code{font-size:12px}</style></head><body>\n";
  o << "<h1>trainbench history</h1>\n<p>" << views.size() << " series from <code>" << xml_escape(where)
    << "</code>. A change point is where the series' run medians shift (E-Divisive means with a t-test); the "
       "environment changes across it are named, not judged.</p>\n";
  o << "<table><tr><th>series</th><th>machine</th><th>branch</th><th>runs</th><th>latest median</th><th>latest "
       "change</th></tr>\n";
  for (const auto& v : views) {
    std::string latest = "-";
    for (auto it = v.runs.rbegin(); it != v.runs.rend(); ++it)
      if (counts(*it)) {
        latest = num(*it->median);
        break;
      }
    std::string change = "none";
    if (!v.change_points.points.empty()) {
      const auto& c = v.change_points.points.back();
      std::string commit;
      for (const auto& r : v.runs)
        if (r.id == c.run_id) commit = r.commit.substr(0, 10);
      change = "<span class='" + std::string(c.change_pct < 0 ? "down" : "up") + "'>" + pct(c.change_pct) +
               "</span> at " + xml_escape(commit) +
               (c.environment_changes.empty() ? "" : " (" + xml_escape(join(c.environment_changes, ", ")) + ")");
    }
    o << "<tr><td><a href='#s" << xml_escape(v.series.id) << "'>" << xml_escape(v.series.profile_name) << "</a></td><td>"
      << xml_escape(v.series.machine_class) << "</td><td>" << xml_escape(v.branch) << "</td><td>" << v.runs.size()
      << "</td><td>" << latest << "</td><td>" << change << "</td></tr>\n";
  }
  o << "</table>\n";
  for (const auto& v : views) o << "<section id='s" << xml_escape(v.series.id) << "'>\n" << history_chart_svg(v) << "</section>\n";
  o << "</body></html>\n";
  return o.str();
}

}  // namespace trainbench
