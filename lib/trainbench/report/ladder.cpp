#include "trainbench/report/ladder.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

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

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string md_cell(std::string s) { return replace_all(std::move(s), "|", "\\|"); }

// Whether a step up the ladder is real: its 95% interval and compare's verdict at the default
// threshold (3%), where both rungs have the windows for one.
std::string step_interval(const std::vector<double>& before, const std::vector<double>& now) {
  if (before.empty() || now.empty()) return "";
  pair_row row;
  row.base = before;
  row.candidate = now;
  row = judge(row, 3.0, 0.05);
  if (!row.interval) return "";
  char buf[96];
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
           (previous ? pct(v, *previous) + step_interval(previous_rung->windows, r.windows) : "–") + " | " +
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

std::string value_label(const ladder_rung& r) {
  if (!r.samples_per_s) return "failed";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f samples/s", *r.samples_per_s);
  return std::string(buf) + (r.without_effect ? " (no effect here)" : "");
}

// One group per rung, in its own coordinates, so more marks (whiskers, labels) can join it.
std::string rung_group(const ladder_rung& r, int y, int label_w, int chart_w, int bar_h, double max_v) {
  std::string g = "<g class=\"rung\" transform=\"translate(0," + std::to_string(y) + ")\">\n";
  g += "<text class=\"name\" x=\"" + std::to_string(label_w - 8) + "\" y=\"18\" text-anchor=\"end\">" +
       xml_escape(r.rung) + "</text>\n";
  const int w = r.samples_per_s ? std::max(1, static_cast<int>(chart_w * *r.samples_per_s / max_v)) : 0;
  const char* cls = !r.samples_per_s ? "bar failed" : r.without_effect ? "bar no-effect" : "bar";
  const char* fill = !r.samples_per_s ? "#e45756" : r.without_effect ? "#a0a0a0" : "#4c78a8";
  g += "<rect class=\"" + std::string(cls) + "\" x=\"" + std::to_string(label_w) + "\" y=\"0\" width=\"" +
       std::to_string(w) + "\" height=\"" + std::to_string(bar_h) + "\" fill=\"" + fill + "\"/>\n";
  g += "<text class=\"value\" x=\"" + std::to_string(label_w + w + 6) + "\" y=\"18\"" +
       (r.samples_per_s ? "" : " fill=\"#e45756\"") + ">" + xml_escape(value_label(r)) + "</text>\n";
  return g + "</g>\n";
}

}  // namespace

std::string ladder_svg(const std::vector<ladder_rung>& rungs, const std::string& title) {
  const int bar_h = 26, gap = 8, chart_w = 520, top = 40;
  double max_v = 1;
  int label_w = 120, value_w = 0;
  for (const auto& r : rungs) {
    if (r.samples_per_s) max_v = std::max(max_v, *r.samples_per_s);
    label_w = std::max(label_w, text_width(r.rung) + 16);
    value_w = std::max(value_w, text_width(value_label(r)) + 12);
  }
  const int height = top + static_cast<int>(rungs.size()) * (bar_h + gap) + 20;
  const int width = std::max(label_w + chart_w + value_w, text_width(title, 10) + 20);
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"10\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
  for (std::size_t i = 0; i < rungs.size(); ++i)
    s += rung_group(rungs[i], top + static_cast<int>(i) * (bar_h + gap), label_w, chart_w, bar_h, max_v);
  s += "</svg>\n";
  return s;
}

}  // namespace trainbench
