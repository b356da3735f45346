#include "trainbench/report/ladder.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "trainbench/commands/commands.hpp"
#include "trainbench/distributed/launch.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
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

}  // namespace

std::string ladder_markdown(const std::vector<ladder_rung>& rungs) {
  std::string out = "| rung | what changed | samples/s | vs previous | vs first |\n|---|---|---:|---:|---:|\n";
  std::optional<double> first, previous;
  const ladder_rung* previous_rung = nullptr;
  char buf[64];
  for (const auto& r : rungs) {
    if (!r.samples_per_s) {
      out += "| " + md_cell(r.rung) + " | " + md_cell(r.change) + " | failed: " + md_cell(r.failure) + " | | |\n";
      continue;
    }
    const double v = *r.samples_per_s;
    std::snprintf(buf, sizeof buf, "%.1f", v);
    out += "| " + md_cell(r.rung) + " | " + md_cell(r.change) + " | " + buf + " | " +
           (previous ? pct(v, *previous) + step_interval(previous_rung->windows, r.windows) : "–") + " | " +
           (first ? pct(v, *first) : "–") + " |\n";
    if (!first) first = v;
    previous = v;
    previous_rung = &r;
  }
  return out;
}

std::string ladder_svg(const std::vector<ladder_rung>& rungs, const std::string& title) {
  const int bar_h = 26, gap = 8, label_w = 260, chart_w = 520, top = 40;
  double max_v = 1;
  for (const auto& r : rungs)
    if (r.samples_per_s) max_v = std::max(max_v, *r.samples_per_s);
  const int height = top + static_cast<int>(rungs.size()) * (bar_h + gap) + 20;
  const int width = label_w + chart_w + 120;
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
       std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"10\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
  char buf[512];
  for (std::size_t i = 0; i < rungs.size(); ++i) {
    const auto& r = rungs[i];
    const int y = top + static_cast<int>(i) * (bar_h + gap);
    s += "<text x=\"" + std::to_string(label_w - 8) + "\" y=\"" + std::to_string(y + 18) + "\" text-anchor=\"end\">" +
         xml_escape(r.rung) + "</text>\n";
    if (r.samples_per_s) {
      const int w = std::max(1, static_cast<int>(chart_w * *r.samples_per_s / max_v));
      std::snprintf(buf, sizeof buf,
                    "<rect class=\"bar\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#4c78a8\"/>\n"
                    "<text x=\"%d\" y=\"%d\">%.1f samples/s</text>\n",
                    label_w, y, w, bar_h, label_w + w + 6, y + 18, *r.samples_per_s);
    } else {
      std::snprintf(buf, sizeof buf,
                    "<rect class=\"bar failed\" x=\"%d\" y=\"%d\" width=\"0\" height=\"%d\" fill=\"#e45756\"/>\n"
                    "<text x=\"%d\" y=\"%d\" fill=\"#e45756\">failed</text>\n",
                    label_w, y, bar_h, label_w + 6, y + 18);
    }
    s += buf;
  }
  s += "</svg>\n";
  return s;
}

int ladder_command(const ladder_request& req) {
  const auto profiles = ladder_profiles(req.inputs);
  // Under torchrun or srun every rank climbs the ladder; rank 0 alone writes reports and the table.
  const bool writer = read_launch(process_environment()).rank == 0;
  int other_rank_code = exit_code::ok;
  std::vector<ladder_rung> rungs;
  for (const auto& file : profiles) {
    ladder_rung rung;
    rung.rung = fs::path(file).stem().string();
    const std::string report = (fs::path(req.out) / (rung.rung + ".json")).string();
    run_request run;
    run.config = file;
    run.sets = req.sets;
    run.out = report;
    run.quiet = req.quiet;
    run.command_line = req.command_line;
    std::cout << "== " << rung.rung << "\n" << std::flush;
    try {
      const int code = run_command(run);
      if (code == exit_code::interrupted) throw interrupted_error();
      if (!writer) other_rank_code = std::max(other_rank_code, code);
    } catch (const interrupted_error&) {
      throw;
    } catch (const std::exception& e) {
      // A rung that cannot start (bad profile, out of memory) is shown as failed; the ladder goes on.
      rung.failure = e.what();
    }
    if (!writer) {
      if (!rung.failure.empty()) other_rank_code = exit_code::failed;
      continue;
    }
    if (rung.failure.empty()) {
      const auto j = read_reports(report).front();
      rung.change = j["profile"].value("description", "");
      if (j["status"] != "ok")
        rung.failure = j["error"].value("message", "failed");
      else
        rung.samples_per_s = j["results"]["samples_per_s"]["median"].get<double>();
      for (const auto& w : j["results"]["repeats"]) rung.windows.push_back(w["samples_per_s"].get<double>());
    }
    rungs.push_back(rung);
  }
  if (!writer) return other_rank_code;
  const std::string md = ladder_markdown(rungs);
  write_file_atomic(fs::path(req.out) / "ladder.md", md);
  write_file_atomic(fs::path(req.out) / "ladder.svg", ladder_svg(rungs, "trainbench ladder: samples/s per rung"));
  std::cout << "\n" << md << "\nwrote " << (fs::path(req.out) / "ladder.md").string() << " and ladder.svg\n";
  for (const auto& r : rungs)
    if (!r.samples_per_s) return exit_code::failed;
  return exit_code::ok;
}

}  // namespace trainbench
