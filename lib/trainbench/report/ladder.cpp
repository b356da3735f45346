#include "trainbench/report/ladder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>

#include "trainbench/measure/stats.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;

std::vector<std::string> ladder_profiles(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const auto& in : inputs) {
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in))
        if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") found.push_back(e.path().string());
      std::sort(found.begin(), found.end(), natural_less);
      out.insert(out.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in)) {
      out.push_back(in);
    } else {
      throw input_error("ladder: '" + in + "' is neither a profile file nor a folder");
    }
  }
  if (out.empty()) throw input_error("ladder: no *.yaml profiles found");
  return out;
}

namespace {

std::string pct(double now, double before) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * (now / before - 1.0));
  return buf;
}

std::string md_cell(std::string s) { return replace_all(std::move(s), "|", "\\|"); }

// Whether a step up the ladder is real: its 95% interval and compare's verdict at the default
// threshold (3%), at the process level (each rung's process medians); where the rungs have too
// few processes for an interval, what would decide it.
std::string step_interval(const ladder_rung& before, const ladder_rung& now) {
  if (before.windows.empty() || now.windows.empty()) return "";
  pair_row row;
  row.base = before.windows;
  row.base_process = before.processes;
  row.candidate = now.windows;
  row.candidate_process = now.processes;
  row = judge(row, 3.0, 0.05);
  char buf[128];
  if (!row.interval) {
    std::snprintf(buf, sizeof buf, " %s (%zu vs %zu processes)", to_string(row.result), row.base_units.size(),
                  row.candidate_units.size());
    return buf;
  }
  std::snprintf(buf, sizeof buf, " [%+.1f%%, %+.1f%%] %s", row.interval->low_pct, row.interval->high_pct,
                to_string(row.result));
  return buf;
}

// The noise flag of a samples/s cell (results.noise's thresholds).
std::string noise_flag(const std::vector<double>& windows) {
  const summary s = summarize(windows);
  const std::string level = noise_level(s);
  if (level == "ok") return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, level == "noisy" ? " (cv %.0f%%)" : " (cv %.0f%%: unreliable)", 100.0 * s.cv);
  return buf;
}

std::string as_run_cell(const ladder_rung& r) {
  std::vector<std::string> parts = r.as_run;
  if (!r.no_effect.empty())
    parts.push_back(std::string(r.without_effect ? "**no effect here**: " : "no effect here: ") +
                    join(r.no_effect, "; "));
  return md_cell(join(parts, "; "));
}

}  // namespace

std::string ladder_markdown(const std::vector<ladder_rung>& rungs) {
  std::string out =
      "| rung | what changed | samples/s | vs previous | vs first | as run here |\n|---|---|---:|---:|---:|---|\n";
  std::optional<double> first, previous;
  const ladder_rung* previous_rung = nullptr;
  char buf[64];
  for (const auto& r : rungs) {
    if (!r.samples_per_s) {
      out += "| " + md_cell(r.rung) + " | " + md_cell(r.change) + " | failed: " + md_cell(r.failure) + " | | | " +
             as_run_cell(r) + " |\n";
      continue;
    }
    const double v = *r.samples_per_s;
    std::snprintf(buf, sizeof buf, "%.1f", v);
    out += "| " + md_cell(r.rung) + " | " + md_cell(r.change) + " | " + buf + noise_flag(r.windows) + " | " +
           (previous ? pct(v, *previous) + step_interval(*previous_rung, r) : "–") + " | " +
           (first ? pct(v, *first) : "–") + " | " + as_run_cell(r) + " |\n";
    if (!first) first = v;
    previous = v;
    previous_rung = &r;
  }
  return out;
}

namespace {

// Width of a text in the chart's 13 px sans-serif, generously (no font metrics in an SVG file).
int text_width(const std::string& s, int px_per_char = 8) { return static_cast<int>(s.size()) * px_per_char; }

// What a rung's bar means beside it: the rung's numbers and, where given, the reference's.
struct rung_marks {
  std::optional<double> first;            // the first rung's median: the speed-up's base
  std::optional<double> reference;        // this rung's reference samples/s
  std::optional<double> first_reference;  // the first rung's
};

std::string value_label(const ladder_rung& r, const rung_marks& m) {
  if (!r.samples_per_s) return "failed";
  std::string out = fmt::format("{:.1f} samples/s", *r.samples_per_s);
  if (m.first) out += fmt::format(" \u00d7{:.2f}", *r.samples_per_s / *m.first);
  if (m.reference) {
    out += fmt::format(" \u00b7 reference {:.1f}", *m.reference);
    if (m.first && m.first_reference) out += fmt::format(" (\u00d7{:.2f})", *m.reference / *m.first_reference);
  }
  return out + (r.without_effect ? " (no effect here)" : "");
}

// A diamond at the reference's samples/s, over the bar's row.
std::string reference_mark(double x, double mid, const std::string& title) {
  return fmt::format(
      "<path class=\"reference\" d=\"M{:.1f},{:.1f} l7,8 l-7,8 l-7,-8 z\" fill=\"#f58518\" "
      "stroke=\"#7a3f00\" stroke-width=\"0.8\">{}</path>\n",
      x, mid - 8, title.empty() ? "" : "<title>" + xml_escape(title) + "</title>");
}

// One group per rung, in its own coordinates, so more marks (whiskers, labels) can join it.
std::string rung_group(const ladder_rung& r, const rung_marks& m, int y, int label_w, int chart_w, int bar_h,
                       double max_v) {
  const auto x_of = [&](double v) { return label_w + chart_w * std::max(0.0, v) / max_v; };
  const double mid = bar_h / 2.0;
  std::string g = "<g class=\"rung\" transform=\"translate(0," + std::to_string(y) + ")\">\n";
  g += "<text class=\"name\" x=\"" + std::to_string(label_w - 8) + "\" y=\"18\" text-anchor=\"end\">" +
       xml_escape(r.rung) + "</text>\n";
  const int w = r.samples_per_s ? std::max(1, static_cast<int>(chart_w * *r.samples_per_s / max_v)) : 0;
  const char* cls = !r.samples_per_s ? "bar failed" : r.without_effect ? "bar no-effect" : "bar";
  const char* fill = !r.samples_per_s ? "#e45756" : r.without_effect ? "#a0a0a0" : "#4c78a8";
  g += "<rect class=\"" + std::string(cls) + "\" x=\"" + std::to_string(label_w) + "\" y=\"0\" width=\"" +
       std::to_string(w) + "\" height=\"" + std::to_string(bar_h) + "\" fill=\"" + fill + "\"/>\n";
  double right = label_w + w;
  if (r.samples_per_s && r.windows.size() >= 2) {
    const summary q = summarize(r.windows);
    const double x1 = x_of(q.q1), x3 = x_of(q.q3);
    fmt::format_to(std::back_inserter(g),
                   "<g class=\"iqr\" stroke=\"#222\" stroke-width=\"1.5\"><title>IQR {:.1f} to {:.1f} samples/s over "
                   "{} windows</title><line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
                   "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/>"
                   "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\"/></g>\n",
                   q.q1, q.q3, r.windows.size(), x1, mid, x3, mid, x1, mid - 6, x1, mid + 6, x3, mid - 6, x3, mid + 6);
    right = std::max(right, x3);
  }
  if (m.reference) {
    g += reference_mark(x_of(*m.reference), mid, fmt::format("reference {:.1f} samples/s", *m.reference));
    right = std::max(right, x_of(*m.reference) + 7);
  }
  g += fmt::format("<text class=\"value\" x=\"{}\" y=\"18\"{}>{}</text>\n", static_cast<int>(std::ceil(right)) + 6,
                   r.samples_per_s ? "" : " fill=\"#e45756\"", xml_escape(value_label(r, m)));
  return g + "</g>\n";
}

}  // namespace

std::string ladder_svg(const std::vector<ladder_rung>& rungs, const std::string& title,
                       const ladder_reference& reference, const std::string& reference_source) {
  const int bar_h = 26, gap = 8, chart_w = 520, top = 40;
  double max_v = 1;
  int label_w = 120, value_w = 0;
  bool any_iqr = false;
  std::vector<rung_marks> marks(rungs.size());
  std::optional<double> first, first_reference;
  for (std::size_t i = 0; i < rungs.size(); ++i) {
    const auto& r = rungs[i];
    rung_marks& m = marks[i];
    const auto ref = reference.find(r.rung);
    if (ref != reference.end()) m.reference = ref->second;
    if (r.samples_per_s && !first) {
      first_reference = m.reference;
    } else {
      m.first = first;
      m.first_reference = first_reference;
    }
    if (r.samples_per_s && !first) first = r.samples_per_s;
    if (r.samples_per_s) max_v = std::max(max_v, *r.samples_per_s);
    if (r.samples_per_s && r.windows.size() >= 2) {
      max_v = std::max(max_v, summarize(r.windows).q3);
      any_iqr = true;
    }
    if (m.reference) max_v = std::max(max_v, *m.reference);
  }
  for (std::size_t i = 0; i < rungs.size(); ++i) {
    label_w = std::max(label_w, text_width(rungs[i].rung) + 16);
    value_w = std::max(value_w, text_width(value_label(rungs[i], marks[i])) + 12);
  }
  std::string legend = "bar: the median of the measured windows";
  if (any_iqr) legend += "; whisker: their interquartile range";
  if (first) legend += "; \u00d7: speed-up over the first rung";
  if (!reference.empty())
    legend += "; diamond: reference samples/s" + (reference_source.empty() ? "" : " (" + reference_source + ")");
  const int rows_end = top + static_cast<int>(rungs.size()) * (bar_h + gap);
  const int height = rows_end + 36;
  const int width = std::max({label_w + chart_w + 7 + value_w, text_width(title, 10) + 20, text_width(legend, 7) + 20});
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"10\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
  for (std::size_t i = 0; i < rungs.size(); ++i)
    s += rung_group(rungs[i], marks[i], top + static_cast<int>(i) * (bar_h + gap), label_w, chart_w, bar_h, max_v);
  s += "<text class=\"legend\" x=\"10\" y=\"" + std::to_string(rows_end + 20) + "\" font-size=\"12\" fill=\"#444\">" +
       xml_escape(legend) + "</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace trainbench
