#include "trainbench/timeline/timeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <iterator>
#include <map>
#include <set>

#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {

namespace {

constexpr int width = 1280, label_w = 200, right_pad = 24, plot_w = width - label_w - right_pad;
constexpr int row_h = 16, bar_h = 14, lane_pad = 5, counter_h = 40, max_rows = 5;

// One colour per span name, the same in every chart: waiting in warm reds and greys, the step in
// blues and greens, the loader in browns.
const char* colour_of(const std::string& name) {
  static const std::map<std::string, const char*> colours = {
      {"batch", "#e8e8e8"},    {"data_wait", "#e45756"}, {"h2d", "#f58518"},       {"preprocess", "#eeca3b"},
      {"forward", "#4c78a8"},  {"backward", "#72b7b2"},  {"allreduce", "#b279a2"}, {"optimizer", "#54a24b"},
      {"step", "#3b5b92"},
      {"fill", "#9d755d"},     {"read", "#bab0ac"},      {"decode", "#ff9da6"},    {"crop_resize", "#9ecae9"},
      {"slot_wait", "#d0d0d0"}};
  const auto it = colours.find(name);
  return it == colours.end() ? "#888888" : it->second;
}

// Darker text on light bars.
const char* text_colour_of(const std::string& name) {
  static const std::set<std::string> dark = {"forward", "data_wait", "fill", "allreduce", "optimizer", "step"};
  return dark.count(name) ? "white" : "#222";
}

// Waiting, not working: left out of a lane's busy share.
bool is_wait(const std::string& name) { return name == "data_wait" || name == "slot_wait" || name == "batch"; }

// Tick spacing of 1, 2 or 5 times a power of ten, about 10 ticks across.
double tick_step(double span_ms) {
  const double raw = span_ms / 10.0;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

// Length of the union of [a, b) intervals clipped to [lo, hi].
double union_length(std::vector<std::pair<double, double>> v, double lo, double hi) {
  std::sort(v.begin(), v.end());
  double total = 0, cur_a = 0, cur_b = -1;
  bool open = false;
  for (auto [a, b] : v) {
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (b <= a) continue;
    if (open && a <= cur_b) {
      cur_b = std::max(cur_b, b);
      continue;
    }
    if (open) total += cur_b - cur_a;
    cur_a = a;
    cur_b = b;
    open = true;
  }
  if (open) total += cur_b - cur_a;
  return total;
}

struct chart {
  double lo = 0, hi = 1;  // visible range, us
  double t0 = 0;          // the time axis' zero: the first batch's start
  double x(double us) const { return label_w + plot_w * (std::clamp(us, lo, hi) - lo) / (hi - lo); }
  std::string out;
  std::set<std::string> used;  // span names drawn, for the legend
  bool launch_drawn = false;
  std::map<int, double> lane_mid;  // tid -> y of its first row, for flow arrows
  std::map<int, double> lane_top;
};

void draw_axis(chart& c, int y_top, int y_bottom) {
  const double span_ms = (c.hi - c.lo) / 1000.0;
  const double step = tick_step(span_ms);
  const double first = std::ceil((c.lo - c.t0) / 1000.0 / step) * step;
  c.out += "<g class=\"axis\" font-size=\"11\" fill=\"#444\">\n";
  for (double ms = first; c.t0 + ms * 1000.0 <= c.hi; ms += step) {
    const double x = c.x(c.t0 + ms * 1000.0);
    fmt::format_to(std::back_inserter(c.out),
                   "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#dddddd\"/>\n"
                   "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
                   x, y_top, y_bottom, y_top - 4, std::round(ms / step) * step + 0.0);  // + 0.0: no "-0"
  }
  fmt::format_to(std::back_inserter(c.out), "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">ms</text>\n</g>\n",
                 label_w - 8, y_top - 4);
}

int lane_rows(const trace_lane& lane, const chart& c) {
  int rows = 1;
  for (const auto& s : lane.spans)
    if (s.end_us() > c.lo && s.ts_us < c.hi) rows = std::max(rows, std::min(max_rows, s.depth + 1));
  return rows;
}

void draw_span(chart& c, const trace_span& s, int y) {
  const double x0 = c.x(s.ts_us), x1 = c.x(s.end_us());
  const double w = std::max(0.6, x1 - x0);
  const bool launch = s.cat == "launch";
  const bool batch = s.name == "batch";
  c.used.insert(s.name);
  c.launch_drawn = c.launch_drawn || launch;
  std::string title = s.name;
  if (s.batch >= 0) title += ", batch " + std::to_string(s.batch);
  if (s.for_batch >= 0 && s.for_batch != s.batch) title += " (the data of batch " + std::to_string(s.for_batch) + ")";
  if (s.slot >= 0) title += ", slot " + std::to_string(s.slot);
  if (launch) title += " (host side: when the work was enqueued)";
  fmt::format_to(
      std::back_inserter(c.out),
      "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"{}{}><title>{}: {:.3f} ms</title>"
      "</rect>\n",
      x0, y, w, bar_h, colour_of(s.name), launch ? " fill-opacity=\"0.45\"" : "",
      batch ? " stroke=\"#9a9a9a\" stroke-width=\"0.8\"" : "", xml_escape(title), s.dur_us / 1000.0);
  std::string label = batch ? "batch " + std::to_string(s.batch)
                            : (s.name == "fill" && s.batch >= 0 ? "fill " + std::to_string(s.batch) : s.name);
  if (w < 6.2 * static_cast<double>(label.size()) + 6) {
    if (!batch && s.name != "fill") return;
    label = std::to_string(s.batch);  // a batch number still fits where its name does not
    if (w < 6.2 * static_cast<double>(label.size()) + 4) return;
  }
  fmt::format_to(std::back_inserter(c.out), "<text x=\"{:.2f}\" y=\"{}\" font-size=\"10\" fill=\"{}\">{}</text>\n",
                 x0 + 3, y + bar_h - 4, batch ? "#333" : text_colour_of(s.name), xml_escape(label));
}

int draw_lane(chart& c, const trace_lane& lane, int y) {
  const int rows = lane_rows(lane, c);
  const int h = rows * row_h + 2 * lane_pad;
  // Shares of the visible range: working (any span but a wait or the batch bracket), and waiting.
  std::vector<std::pair<double, double>> work, waiting;
  std::string wait_name;
  for (const auto& s : lane.spans) {
    if (s.cat == "launch") continue;
    if (!is_wait(s.name)) work.emplace_back(s.ts_us, s.end_us());
    if (s.name == "data_wait" || s.name == "slot_wait") {
      waiting.emplace_back(s.ts_us, s.end_us());
      wait_name = s.name;
    }
  }
  const double range = c.hi - c.lo;
  const double busy = union_length(work, c.lo, c.hi) / range;
  std::string share = fmt::format("busy {:.0f}%", 100.0 * busy);
  if (!waiting.empty())
    share += fmt::format(", {} {:.0f}%", wait_name, 100.0 * union_length(waiting, c.lo, c.hi) / range);
  fmt::format_to(std::back_inserter(c.out),
                 "<g class=\"lane\" data-tid=\"{}\" data-name=\"{}\">\n"
                 "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f6f6f6\"/>\n"
                 "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"12\">{}</text>\n"
                 "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"10\" fill=\"#666\">{}</text>\n",
                 lane.tid, xml_escape(lane.name), label_w, y, plot_w, h, label_w - 8, y + 15, xml_escape(lane.name),
                 label_w - 8, y + 28, share);
  for (const auto& s : lane.spans) {
    if (s.end_us() <= c.lo || s.ts_us >= c.hi || s.depth >= max_rows) continue;
    draw_span(c, s, y + lane_pad + s.depth * row_h);
  }
  c.out += "</g>\n";
  c.lane_top[lane.tid] = y;
  c.lane_mid[lane.tid] = y + lane_pad + bar_h / 2.0;
  return h;
}

void draw_counter(chart& c, const trace_counter& k, int y) {
  double start = 0, peak = 0;
  std::vector<std::pair<double, double>> visible;
  for (const auto& [t, v] : k.points) {
    if (t <= c.lo) start = v;
    if (t > c.lo && t < c.hi) visible.emplace_back(t, v);
  }
  peak = start;
  for (const auto& p : visible) peak = std::max(peak, p.second);
  const double top = std::max(1.0, peak);
  auto vy = [&](double v) { return y + counter_h - 4 - (counter_h - 10) * v / top; };
  std::string points = fmt::format("{:.1f},{:.1f}", c.x(c.lo), vy(start));
  double last = start;
  for (const auto& [t, v] : visible) {
    points += fmt::format(" {0:.1f},{1:.1f} {0:.1f},{2:.1f}", c.x(t), vy(last), vy(v));
    last = v;
  }
  points += fmt::format(" {:.1f},{:.1f}", c.x(c.hi), vy(last));
  fmt::format_to(std::back_inserter(c.out),
                 "<g class=\"counter\" data-name=\"{0}\">\n"
                 "<rect x=\"{1}\" y=\"{2}\" width=\"{3}\" height=\"{4}\" fill=\"#fbfbfb\"/>\n"
                 "<text x=\"{5}\" y=\"{6}\" text-anchor=\"end\" font-size=\"12\">{0}</text>\n"
                 "<text x=\"{5}\" y=\"{7}\" text-anchor=\"end\" font-size=\"10\" fill=\"#666\">0 to {8:g}</text>\n"
                 "<polyline points=\"{9}\" fill=\"none\" stroke=\"#4c78a8\" stroke-width=\"1.3\"/>\n</g>\n",
                 xml_escape(k.name), label_w, y, plot_w, counter_h, label_w - 8, y + 15, y + 28, top, points);
}

// Only arrows with both ends in the range: one clipped at an edge would cross the whole chart.
int draw_flows(chart& c, const trace_model& m) {
  int drawn = 0;
  c.out += "<g class=\"flows\" stroke=\"#444\" stroke-opacity=\"0.7\" stroke-width=\"1\" fill=\"none\">\n";
  for (const auto& f : m.flows) {
    if (f.to_us < c.lo || f.to_us > c.hi || f.from_us < c.lo) continue;
    if (!c.lane_mid.count(f.from_tid) || !c.lane_mid.count(f.to_tid)) continue;
    fmt::format_to(std::back_inserter(c.out),
                   "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                   "marker-end=\"url(#arrow)\"/>\n",
                   c.x(f.from_us), c.lane_mid[f.from_tid], c.x(f.to_us), c.lane_mid[f.to_tid] + row_h);
    ++drawn;
  }
  c.out += "</g>\n";
  return drawn;
}

void draw_windows(chart& c, const trace_model& m, int y_top, int y_bottom) {
  for (const auto& w : m.windows) {
    for (double t : {w.ts_us, w.end_us()}) {
      if (t <= c.lo || t >= c.hi) continue;
      fmt::format_to(std::back_inserter(c.out),
                     "<line class=\"window\" x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#333\" "
                     "stroke-dasharray=\"4 3\"/>\n<text x=\"{3:.1f}\" y=\"{4}\" font-size=\"10\" fill=\"#333\">"
                     "window {5}</text>\n",
                     c.x(t), y_top, y_bottom, c.x(t) + 3, y_bottom - 3, t == w.ts_us ? "starts" : "ends");
    }
  }
}

int draw_legend(chart& c, int y) {
  static const char* order[] = {"batch",     "data_wait", "h2d",       "preprocess", "forward",
                                "backward",  "allreduce", "optimizer", "step",       "fill",
                                "slot_wait", "read",      "decode",    "crop_resize"};
  double x = label_w;
  c.out += "<g class=\"legend\" font-size=\"11\">\n";
  auto item = [&](const std::string& fill, const std::string& text, const char* extra) {
    const double w = 16 + 6.5 * static_cast<double>(text.size()) + 14;
    if (x + w > width - right_pad) {
      x = label_w;
      y += 18;
    }
    fmt::format_to(std::back_inserter(c.out),
                   "<rect x=\"{:.1f}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"{}/>"
                   "<text x=\"{:.1f}\" y=\"{}\">{}</text>\n",
                   x, y, fill, extra, x + 16, y + 10, xml_escape(text));
    x += w;
  };
  for (const char* name : order)
    if (c.used.count(name)) item(colour_of(name), name, std::string(name) == "batch" ? " stroke=\"#9a9a9a\"" : "");
  if (c.launch_drawn) item("#4c78a8", "pale: host side of a device stage", " fill-opacity=\"0.45\"");
  item("#f6f6f6", "idle", " stroke=\"#cccccc\"");
  c.out += "</g>\n";
  return y + 18;
}

}  // namespace

batch_range default_batches(const trace_model& m) {
  const auto batches = traced_batches(m);
  if (batches.empty()) return {0, 0};
  return {batches.front(), batches.front() + std::min<std::int64_t>(3, static_cast<std::int64_t>(batches.size()))};
}

std::string timeline_svg(const trace_model& m, const batch_range& r) {
  chart c;
  double t1 = 0;
  if (!batch_extent(m, r, c.t0, t1)) {
    const auto b = traced_batches(m);
    throw input_error(
        "--batches " + std::to_string(r.first) + ":" + std::to_string(r.end) + ": " +
        (b.empty() ? std::string("the trace holds no measured batch")
                   : "the trace holds batches " + std::to_string(b.front()) + " to " + std::to_string(b.back())));
  }
  const double margin = 0.015 * (t1 - c.t0);
  c.lo = c.t0 - margin;
  c.hi = t1 + margin;
  int lanes_h = 0;
  for (const auto& lane : m.lanes) lanes_h += lane_rows(lane, c) * row_h + 2 * lane_pad + 4;
  const int top = 78;
  const int body_h = lanes_h + static_cast<int>(m.counters.size()) * (counter_h + 4);

  int y = top;
  for (const auto& lane : m.lanes) y += draw_lane(c, lane, y) + 4;
  for (const auto& k : m.counters) {
    draw_counter(c, k, y);
    y += counter_h + 4;
  }
  const int arrows = draw_flows(c, m);
  draw_windows(c, m, top, top + body_h);
  std::string lanes_svg;
  std::swap(lanes_svg, c.out);
  draw_axis(c, top - 6, top + body_h);
  const int legend_end = draw_legend(c, top + body_h + 14);
  std::string rest;
  std::swap(rest, c.out);

  const std::string range = r.end - r.first == 1
                                ? "batch " + std::to_string(r.first)
                                : "batches " + std::to_string(r.first) + " to " + std::to_string(r.end - 1);
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  fmt::format_to(std::back_inserter(s),
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                 "font-family=\"sans-serif\">\n"
                 "<defs><marker id=\"arrow\" viewBox=\"0 0 6 6\" refX=\"6\" refY=\"3\" markerWidth=\"6\" "
                 "markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L6,3 L0,6 z\" fill=\"#555\"/></marker></defs>\n"
                 "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                 "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">{2}</text>\n"
                 "<text x=\"10\" y=\"40\" font-size=\"12\" fill=\"#444\">{3}: time in ms from the start of batch {4}; "
                 "empty background is idle; {5}</text>\n",
                 width, legend_end + 8, xml_escape("trainbench timeline: " + m.process), range, r.first,
                 arrows > 0        ? "arrows lead from a worker's fill to the batch that trained on it"
                 : m.flows.empty() ? "no loader workers, so no arrows from fills to batches"
                                   : "no fill lies in this range with the batch that trained on it (widen --batches "
                                     "to see the arrows)");
  s += rest;  // axis and legend under the lanes
  s += lanes_svg;
  s += "</svg>\n";
  return s;
}

int timeline_command(const timeline_request& req) {
  const trace_model m = read_trace(read_text_file(req.trace), req.trace);
  const batch_range r = req.batches.empty() ? default_batches(m) : parse_batch_range(req.batches);
  write_file_atomic(req.out, timeline_svg(m, r));
  std::cout << "wrote " << req.out << " (" << m.lanes.size() << " lanes, batches " << r.first << " to " << r.end - 1
            << ")\n";
  return exit_code::ok;
}

}  // namespace trainbench
