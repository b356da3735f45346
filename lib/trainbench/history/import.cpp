#include "trainbench/history/import.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <regex>

#include "trainbench/measure/stats.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/report/identity.hpp"
#include "trainbench/report/report.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/sha256.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env_var(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string first_env(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env_var(n); !v.empty()) return v;
  return "";
}

// The first line git prints, or "" when git or the repository is missing.
std::string git_line(const char* args) {
  const std::string cmd = std::string("git ") + args + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return "";
  char buf[512];
  std::string out;
  if (std::fgets(buf, sizeof buf, pipe)) out = buf;
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string string_at(const json& j, const char* key, const std::string& fallback = "none") {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
  const json& v = j.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// How far the run's median is known from its own measurements: from the spread of its
// processes' medians when it has several (the process is the unit of evidence), else from its
// windows' spread (the median's large-sample sd, sqrt(pi / 2) sd / sqrt(n)); 0 when unknown.
double median_sd_of(const std::vector<window_record>& windows) {
  std::map<std::int64_t, std::vector<double>> by_process;
  std::vector<double> all;
  for (const auto& w : windows) {
    by_process[w.process].push_back(w.samples_per_s);
    all.push_back(w.samples_per_s);
  }
  if (by_process.size() >= 2) {
    std::vector<double> medians;
    for (const auto& [p, rates] : by_process) medians.push_back(summarize(rates).median);
    return summarize(medians).stdev / std::sqrt(static_cast<double>(medians.size()));
  }
  if (all.size() < 2) return 0;
  return summarize(all).stdev * std::sqrt(M_PI / 2) / std::sqrt(static_cast<double>(all.size()));
}

std::vector<window_record> windows_of(const json& repeats, const std::string& source) {
  std::vector<window_record> out;
  for (std::size_t i = 0; i < repeats.size(); ++i) {
    const json& r = repeats[i];
    window_record w;
    w.samples_per_s = r.at("samples_per_s").get<double>();
    w.samples = r.value("samples", std::int64_t{0});
    w.elapsed_s = r.value("elapsed_s", 0.0);
    w.process = r.value("process", std::int64_t{0});
    if (w.process < 0 || !std::isfinite(w.samples_per_s))
      throw input_error("'" + source + "': results.repeats[" + std::to_string(i) +
                        "]: expected a finite samples_per_s and a process index >= 0");
    out.push_back(w);
  }
  return out;
}

std::vector<fs::path> files_of(const std::string& input) {
  std::vector<fs::path> files;
  if (!fs::is_directory(input)) return {input};
  for (const auto& e : fs::directory_iterator(input))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return natural_less(a.string(), b.string()); });
  return files;
}

}  // namespace

run_origin detect_origin(const run_origin& given) {
  run_origin o = given;
  if (o.commit.empty())
    o.commit = first_env({"GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1", "GIT_COMMIT"});
  if (o.commit.empty()) o.commit = git_line("rev-parse HEAD");
  if (o.branch.empty()) {
    // On a pull request GitHub's GITHUB_REF_NAME is "123/merge"; the head branch is the one meant.
    o.branch = first_env({"GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BUILDKITE_BRANCH",
                          "CIRCLE_BRANCH", "GIT_BRANCH"});
    if (o.branch.rfind("origin/", 0) == 0) o.branch = o.branch.substr(7);
  }
  if (o.branch.empty()) {
    o.branch = git_line("rev-parse --abbrev-ref HEAD");
    if (o.branch == "HEAD") o.branch.clear();  // a detached checkout names no branch
  }
  for (auto* field : {&o.commit, &o.branch})
    if (field->empty()) *field = "unknown";
  return o;
}

std::string normalize_time(const std::string& text, const std::string& what) {
  static const std::regex iso(
      R"(^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$)");
  static const std::regex epoch(R"(^@?(\d{1,12})$)");
  std::smatch m;
  std::time_t t = 0;
  if (std::regex_match(text, m, epoch)) {
    t = static_cast<std::time_t>(std::stoll(m[1]));
  } else if (std::regex_match(text, m, iso)) {
    std::tm tm{};
    tm.tm_year = std::stoi(m[1]) - 1900;
    tm.tm_mon = std::stoi(m[2]) - 1;
    tm.tm_mday = std::stoi(m[3]);
    tm.tm_hour = m[4].matched ? std::stoi(m[4]) : 0;
    tm.tm_min = m[5].matched ? std::stoi(m[5]) : 0;
    tm.tm_sec = m[6].matched ? std::stoi(m[6]) : 0;
    if (tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
      throw input_error(what + " '" + text + "': not a valid date and time");
    t = timegm(&tm);
    const std::string zone = m[7];
    if (!zone.empty() && zone != "Z") {
      const std::string digits = replace_all(zone.substr(1), ":", "");
      const int offset = std::stoi(digits.substr(0, 2)) * 3600 + std::stoi(digits.substr(2, 2)) * 60;
      t -= zone[0] == '+' ? offset : -offset;
    }
  } else {
    throw input_error(
        what + " '" + text +
        "': expected ISO 8601 (2026-12-02T10:00:00Z, 2026-12-02 10:00:00+02:00, 2026-12-02) or Unix seconds");
  }
  std::tm out{};
  gmtime_r(&t, &out);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &out);
  return buf;
}

std::string machine_class_of(const json& report) {
  const json& c = report.at("context");
  if (c.contains("gpu") && c.at("gpu").is_object()) {
    std::int64_t count = 1;
    const json& results = report.at("results");
    if (results.contains("distributed") && results.at("distributed").is_object())
      count = results.at("distributed").value("world_size", std::int64_t{1});
    return "gpu: " + string_at(c.at("gpu"), "name", "?") + " x " + std::to_string(count);
  }
  const json cpu = c.value("cpu", json::object());
  return "cpu: " + string_at(cpu, "model", "?") + ", " + string_at(cpu, "cores", "?") + " cores";
}

std::string series_id_of(const std::string& workload_key, const std::string& machine_class) {
  return sha256_hex(workload_key + "\n" + machine_class).substr(0, 16);
}

series_key series_key_of(const json& report) {
  series_key k;
  k.workload = identity_of(report).key();
  k.machine_class = machine_class_of(report);
  k.series_id = series_id_of(k.workload, k.machine_class);
  k.profile_hash = report.at("profile").at("hash").get<std::string>();
  return k;
}

run_record run_from_report(const std::string& text, const std::string& source, const run_origin& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw input_error("'" + source + "': not a JSON report: " + e.what());
  }
  if (!j.is_object() || !j.contains("schema_version") || j["schema_version"] != report_schema_version)
    throw input_error("'" + source + "': report schema_version " +
                      (j.is_object() && j.contains("schema_version") ? j["schema_version"].dump() : "missing") +
                      ", this trainbench reads " + std::to_string(report_schema_version) + "; nothing was added");
  run_record run;
  try {
    const json& profile = j.at("profile");
    const json& context = j.at("context");
    run.id = sha256_hex(j.dump());
    const series_key key = series_key_of(j);
    run.profile_hash = key.profile_hash;
    run.profile_name = profile.at("name").get<std::string>();
    run.machine_class = key.machine_class;
    run.workload = key.workload;
    run.series_id = key.series_id;
    run.status = j.value("status", "ok");
    if (j.contains("error") && j.at("error").is_object()) run.error_kind = string_at(j.at("error"), "kind", "");
    run.windows = windows_of(j.at("results").at("repeats"), source);
    const json dist = j.at("results").value("distributed", json(nullptr));
    if (dist.is_object()) {
      run.world_size = dist.value("world_size", std::int64_t{1});
      run.ranks_in_results = dist.value("ranks_in_results", run.world_size);
    }
    const json gpu = context.value("gpu", json());
    const json tool = j.value("tool", json::object());
    run.env = {gpu.is_object() ? string_at(gpu, "driver") : "none",
               string_at(context, "cuda"),
               string_at(context, "cudnn"),
               string_at(context, "libtorch"),
               string_at(tool, "version", "?") + " (" + string_at(tool, "git", "?") + ")",
               string_at(context, "host", "?"),
               string_at(context, "build_type", "?"),
               run.profile_hash};
    run.time = origin.time.empty()
                   ? normalize_time(context.at("date").get<std::string>(), "'" + source + "': context.date")
                   : origin.time;
  } catch (const json::exception& e) {
    throw input_error("'" + source + "': incomplete report: " + e.what());
  }
  run.commit = origin.commit;
  run.branch = origin.branch;
  run.source = source;
  run.report = text;
  run.window_count = static_cast<std::int64_t>(run.windows.size());
  std::vector<double> rates;
  std::vector<std::int64_t> processes;
  for (const auto& w : run.windows) {
    rates.push_back(w.samples_per_s);
    if (std::find(processes.begin(), processes.end(), w.process) == processes.end()) processes.push_back(w.process);
  }
  run.process_count = static_cast<std::int64_t>(processes.size());
  // One rank's windows of a W-rank job measure a W-th of its work: no median of the job, so the
  // run never counts in a series of W-rank runs (its windows are kept).
  if (!rates.empty() && run.ranks_in_results >= run.world_size) {
    const summary s = summarize(rates);
    run.median = s.median;
    run.q1 = s.q1;
    run.q3 = s.q3;
  }
  run.median_sd = median_sd_of(run.windows);
  return run;
}

read_result read_runs(const std::vector<std::string>& inputs, const run_origin& origin) {
  read_result out;
  for (const auto& input : inputs) {
    if (!fs::exists(input)) throw input_error("'" + input + "': no such report file or folder");
    const bool folder = fs::is_directory(input);
    std::size_t found = 0;
    for (const auto& f : files_of(input)) {
      const std::string text = read_text_file(f);
      if (folder) {
        // A folder may hold other JSON (bottleneck.json, a ladder's table): those are listed, not read.
        json probe = json::parse(text, nullptr, false);
        if (!probe.is_discarded() && !is_run_report(probe)) {
          out.skipped.push_back(f.string());
          continue;
        }
      }
      out.runs.push_back(run_from_report(text, f.string(), origin));
      ++found;
    }
    if (folder && found == 0) throw input_error("'" + input + "': no *.json run reports in this folder");
  }
  return out;
}

}  // namespace trainbench
