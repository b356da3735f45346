#pragma once
// trainbench history: every run kept in a database, change points found over its series.
// `history add` imports reports, `history show` prints and draws the series. No torch here.
#include <cstddef>
#include <string>
#include <vector>

#include "trainbench/history/series.hpp"
#include "trainbench/measure/change_points.hpp"

namespace trainbench {

struct history_add_request {
  std::string db;                   // file or postgresql:// URL; empty: default_history_db()
  std::vector<std::string> inputs;  // report files and folders
  std::string commit, branch, time;
  e_divisive_params params;
  bool quiet = false;
};

struct history_show_request {
  std::string db;
  std::vector<std::string> series;  // a series id (or its first characters) or a profile name; empty: all
  std::string branch;               // empty: each series' branch with the most runs
  std::string out;                  // folder for index.html and one SVG per series; empty: none
  std::string format = "text";      // text | json
  std::size_t last = 10;            // runs per series in the text table
  e_divisive_params params;
  bool otava_compatible = false;  // params as apache-otava 0.8.0 computes (the cross-check's switch)
};

// --db, else $TRAINBENCH_HISTORY_DB, else $XDG_DATA_HOME/trainbench/history.sqlite
// (~/.local/share/trainbench/history.sqlite).
std::string default_history_db();

// --window, --max-p and --min-change as add, show and gate take them; input_error (exit 2) when
// out of range. --window is at most max_change_point_window runs.
constexpr std::size_t max_change_point_window = 1000;
void check_change_point_params(const e_divisive_params& params);

int history_add_command(const history_add_request& request);
int history_show_command(const history_show_request& request);

// The views show prints (also what a gate builds on): the series picked by `wanted`.
std::vector<series_view> load_views(history_store& store, const std::vector<std::string>& wanted,
                                    const std::string& branch, const e_divisive_params& params);
std::string format_history_text(const std::vector<series_view>& views, std::size_t last);
std::string format_history_json(const std::vector<series_view>& views, const std::string& where,
                                const e_divisive_params& params);

// The trend chart of one series (SVG) and the page that lists them all (self-contained HTML).
std::string history_chart_svg(const series_view& view);
std::string history_index_html(const std::vector<series_view>& views, const std::string& where);

}  // namespace trainbench
