#include "trainbench/distributed/rank_merge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "trainbench/config/profile_diff.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {
constexpr double missing = std::numeric_limits<double>::quiet_NaN();
}

std::vector<double> pack_rank(const run_result& r, int repeats) {
  std::vector<double> out;
  for (int w = 0; w < repeats; ++w) {
    const bool have = w < static_cast<int>(r.windows.size());
    out.push_back(have ? static_cast<double>(r.windows[static_cast<std::size_t>(w)].samples) : missing);
    out.push_back(have ? r.windows[static_cast<std::size_t>(w)].elapsed_s : missing);
  }
  auto it = r.stages_s.find("allreduce");
  out.push_back(it == r.stages_s.end() || it->second.empty() ? missing : quantile(it->second, 0.5));
  return out;
}

void merge_ranks(run_result& rank0, const std::vector<std::vector<double>>& packed) {
  dist_result& d = *rank0.dist;
  d.ranks.clear();
  int most = 0;
  for (std::size_t r = 0; r < packed.size(); ++r) {
    const auto& v = packed[r];
    TB_ASSERT(v.size() % 2 == 1, "a rank packed a window without its time");
    const int repeats = static_cast<int>(v.size() / 2);
    most = std::max(most, repeats);
    rank_result rr;
    rr.rank = static_cast<int>(r);
    for (int w = 0; w < repeats; ++w) {
      const double samples = v[static_cast<std::size_t>(2 * w)], elapsed = v[static_cast<std::size_t>(2 * w + 1)];
      if (std::isnan(samples)) break;
      rr.windows.push_back({static_cast<std::int64_t>(samples), elapsed, samples / elapsed});
    }
    if (!std::isnan(v.back())) rr.allreduce_s_median = v.back();
    d.ranks.push_back(std::move(rr));
  }
  std::vector<window_result> global;
  for (int w = 0; w < most; ++w) {
    window_result g;
    bool complete = true;
    for (const auto& rr : d.ranks) {
      if (w >= static_cast<int>(rr.windows.size())) complete = false;
      if (!complete) break;
      g.samples += rr.windows[static_cast<std::size_t>(w)].samples;
      g.elapsed_s = std::max(g.elapsed_s, rr.windows[static_cast<std::size_t>(w)].elapsed_s);
    }
    if (!complete) break;
    g.samples_per_s = static_cast<double>(g.samples) / g.elapsed_s;
    global.push_back(g);
  }
  rank0.windows = std::move(global);
  d.ranks_in_results = d.world;
}

namespace {

// What per_rank_workload_hash leaves out; the rest of the resolved profile must match.
std::string workload_differences(const nlohmann::json& profile_json, const profile& p) {
  if (!profile_json.contains("resolved") || !profile_json["resolved"].is_string()) return "";
  const auto changes = without_keys(profile_changes(profile_json["resolved"].get<std::string>(), to_yaml(p)),
                                    {"name", "description", "report", "measure", "dist"});
  return describe_changes(changes);
}

}  // namespace

double baseline_rate(const std::string& report_path, const profile& p) {
  const std::string per_rank_workload_hash = trainbench::per_rank_workload_hash(p);
  const auto reports = read_reports(report_path);
  if (reports.size() != 1) throw input_error("--baseline '" + report_path + "': give one report file, not a folder");
  const auto& j = reports.front();
  auto fail = [&](const std::string& why) { throw input_error("--baseline '" + report_path + "': " + why); };
  if (j.value("status", "") != "ok") fail("status is '" + j.value("status", "") + "', not ok");
  const auto& profile = j.at("profile");
  if (!profile.contains("per_rank_workload_hash") ||
      profile["per_rank_workload_hash"].get<std::string>() != per_rank_workload_hash) {
    const std::string keys = workload_differences(profile, p);
    fail("it ran a different workload per rank" +
         (keys.empty() ? std::string(" (model, data, batch, switches)") : ": " + keys + " (baseline -> this run)") +
         "; scaling efficiency compares the same profile at world size 1");
  }
  const auto& dist = j.at("results").value("distributed", nlohmann::json());
  if (dist.is_object() && dist.value("world_size", 1) != 1)
    fail("it ran " + std::to_string(dist.value("world_size", 1)) + " ranks; a baseline runs one");
  std::vector<double> rates;
  for (const auto& w : j.at("results").at("repeats")) rates.push_back(w.at("samples_per_s").get<double>());
  if (rates.empty()) fail("it has no measured windows");
  return summarize(rates).median;
}

}  // namespace trainbench
