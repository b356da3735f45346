// trainbench ladder: every rung measured in fresh processes, the rungs interleaved in rounds, and
// the article's table and chart from the pooled windows (no torch here: the runs are children).
#include "trainbench/report/ladder.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include "trainbench/commands/commands.hpp"
#include "trainbench/commands/fresh_processes.hpp"
#include "trainbench/config/profile_diff.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/distributed/launch.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
namespace {

struct rung_plan {
  process_series run;             // its processes: the ladder's rounds
  std::optional<profile> as_set;  // with the ladder's --set (a profile that cannot load stops the ladder)
  std::string file_yaml;          // without them: what the file, and so its description, says
};

// reports/ladder for configs/ladder, reports/cpu for configs/cpu/*.yaml: one folder per ladder.
fs::path default_out(const std::vector<std::string>& inputs) {
  fs::path first = fs::path(inputs.front()).lexically_normal();
  if (!fs::is_directory(first)) first = first.parent_path();
  std::string name = first.filename().string();
  if (name.empty() || name == "." || name == "..") name = fs::absolute(first).lexically_normal().filename().string();
  return fs::path("reports") / (name.empty() ? "ladder" : name);
}

// One line per distinct error: a bad --set fails every rung alike, and is said once.
std::string refusals_text(const std::vector<std::pair<std::string, std::string>>& refused, std::size_t rungs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> lines;  // error, the rungs it stops
  for (const auto& [stem, message] : refused) {
    auto it = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l.first == message; });
    if (it == lines.end()) it = lines.insert(lines.end(), {message, {}});
    it->second.push_back(stem);
  }
  std::string out;
  for (const auto& [message, stems] : lines)
    out += "\n  " + message +
           (stems.size() == rungs && rungs > 1                 ? " (every rung)"
            : message.find(stems.front()) == std::string::npos ? " (" + join(stems, ", ") + ")"
                                                               : "");
  return out;
}

std::vector<rung_plan> plan_rungs(const ladder_request& req, const fs::path& out) {
  std::vector<rung_plan> plans;
  std::vector<std::pair<std::string, std::string>> refused;  // rung, why
  for (const auto& file : ladder_profiles(req.inputs)) {
    rung_plan r;
    r.run.file = file;
    r.run.stem = fs::path(file).stem().string();
    r.run.report = out / (r.run.stem + ".json");
    r.run.state = out / "rounds" / (r.run.stem + ".json");
    try {
      r.as_set = load_profile(file, req.sets).value;
      r.file_yaml = to_yaml(load_profile(file).value);
    } catch (const config_error& e) {
      refused.emplace_back(r.run.stem, e.what());
    } catch (const input_error& e) {
      refused.emplace_back(r.run.stem, e.what());
    }
    plans.push_back(std::move(r));
  }
  // A misspelt --set or a broken profile is bad input: refused before any rung runs (and before
  // an earlier ladder's results are cleared), not found out rung by rung on a GPU's time.
  if (!refused.empty())
    throw input_error("ladder: " + std::to_string(refused.size()) + " of " + std::to_string(plans.size()) +
                      " profiles cannot run, so no rung ran:" + refusals_text(refused, plans.size()));
  return plans;
}

// The notes that say a key of this rung had no effect ("backend.cuda_graph: requested but
// ineffective: ..."); a note on "transfer" covers transfer.*.
std::vector<std::string> ineffective_notes(const nlohmann::json& notes, const std::string& key) {
  std::vector<std::string> out;
  for (const auto& n : notes) {
    const std::string text = n.get<std::string>();
    const std::size_t colon = text.find(": requested but ineffective");
    if (colon == std::string::npos) continue;
    const std::string on = text.substr(0, colon);
    if (key == on || key.rfind(on + ".", 0) == 0) out.push_back(text);
  }
  return out;
}

// What the table says about how the rung really ran, next to its description.
void describe_as_run(ladder_rung& rung, const rung_plan& r, const rung_plan* previous, const nlohmann::json& report) {
  const std::vector<std::string> not_work{"name", "description", "report", "measure"};
  const auto overrides = without_keys(profile_changes(r.file_yaml, to_yaml(*r.as_set)), not_work);
  if (!overrides.empty()) rung.as_run.push_back("--set " + describe_changes(overrides));
  const std::string device = report["effective"].value("device", "");
  if (device == "cpu" && r.as_set->device != "cpu") rung.as_run.push_back("on the CPU (no CUDA device here)");
  if (!previous || !previous->as_set) return;
  const auto changes = without_keys(profile_changes(to_yaml(*previous->as_set), to_yaml(*r.as_set)), not_work);
  std::size_t ineffective = 0;
  for (const auto& c : changes) {
    const auto notes = ineffective_notes(report["effective"]["notes"], c.key);
    if (!notes.empty()) ++ineffective;
    for (const auto& n : notes)
      if (std::find(rung.no_effect.begin(), rung.no_effect.end(), n) == rung.no_effect.end())
        rung.no_effect.push_back(n);
  }
  rung.without_effect = !changes.empty() && ineffective == changes.size();
  if (changes.empty()) {  // e.g. batch 512 under --set train.batch_size=8: a rerun of the rung before
    rung.no_effect.push_back("the same work as " + previous->run.stem +
                             (overrides.empty() ? "" : " once --set is applied"));
    rung.without_effect = true;
  }
}

ladder_rung table_row(const rung_plan& r, const rung_plan* previous) {
  ladder_rung rung;
  rung.rung = r.run.stem;
  if (!r.run.refused.empty()) {
    rung.failure = r.run.refused;
    return rung;
  }
  rung.change = r.as_set->description;
  if (!fs::exists(r.run.report)) {
    rung.failure =
        r.run.crashed.empty() ? "no report (the run stopped before writing one; see its log above)" : r.run.crashed;
    return rung;
  }
  const auto j = read_reports(r.run.report.string()).front();
  rung.change = j["profile"].value("description", rung.change);
  for (const auto& w : j["results"]["repeats"]) {
    rung.windows.push_back(w["samples_per_s"].get<double>());
    rung.processes.push_back(w.value("process", 0));
  }
  if (j["status"] != "ok")
    rung.failure = j["error"].value("message", "failed");
  else if (!rung.windows.empty())
    rung.samples_per_s = j["results"]["samples_per_s"]["median"].get<double>();
  describe_as_run(rung, r, previous, j);
  return rung;
}

std::string how_measured(const ladder_request& req) {
  std::string order =
      req.shuffle ? "in a new random order every round (--shuffle-seed " + std::to_string(req.shuffle_seed) + ")"
                  : "in the order listed";
  const std::string processes =
      req.rounds == 1 ? "1 fresh process" : std::to_string(req.rounds) + " fresh processes (rounds)";
  return "Each rung ran in " + processes + ", the rungs " + order +
         "; samples/s is the median of all its windows. A step's 95% interval and verdict compare the rungs' "
         "process medians (each process one observation), each step on its own at alpha 0.05.";
}

// --reference, else the numbers the profiles' header comments give (configs/ladder has the
// article's). Read before any rung runs, so a bad file stops the ladder with nothing written.
ladder_reference find_reference(const ladder_request& req, std::string& source) {
  const auto profiles = ladder_profiles(req.inputs);
  std::vector<std::string> rungs;
  for (const auto& file : profiles) rungs.push_back(fs::path(file).stem().string());
  ladder_reference out;
  if (!req.reference.empty()) {
    out = parse_reference(read_text_file(req.reference), req.reference);
    source = fs::path(req.reference).filename().string();
    std::vector<std::string> unknown;
    for (const auto& [name, value] : out)
      if (std::find(rungs.begin(), rungs.end(), name) == rungs.end()) unknown.push_back(name);
    if (!unknown.empty())
      log_warn(req.reference + ": no rung of this ladder is named " + join(unknown, ", ") +
               " (rungs: " + join(rungs, ", ") + ")");
    return out;
  }
  for (const auto& file : profiles)
    for (const auto& [name, value] : header_reference(read_text_file(file), rungs)) out.emplace(name, value);
  if (!out.empty()) source = "from the profiles' header comments";
  return out;
}

}  // namespace

int ladder_command(const ladder_request& req) {
  if (req.rounds < 1) throw input_error("ladder: --rounds must be at least 1, got " + std::to_string(req.rounds));
  const fs::path out = req.out.empty() ? default_out(req.inputs) : fs::path(req.out);
  // Under torchrun or srun every rank climbs the ladder; rank 0 alone writes reports and the table.
  const bool writer = read_launch(process_environment()).rank == 0;
  std::vector<rung_plan> plans = plan_rungs(req, out);  // first: a profile that cannot load is listed with the others
  std::string reference_source;
  const ladder_reference reference = find_reference(req, reference_source);
  if (writer) check_writable_folder(out, "--out");
  set_log_quiet(req.quiet);

  std::vector<process_series> runs;
  for (const auto& r : plans) runs.push_back(r.run);
  fresh_process_request fp;
  fp.processes = req.rounds;
  fp.shuffle = req.shuffle;
  fp.shuffle_seed = req.shuffle_seed;
  for (const auto& s : req.sets) fp.child_arguments.insert(fp.child_arguments.end(), {"--set", s});
  // Each rung's report says how many processes it pooled.
  fp.child_arguments.insert(fp.child_arguments.end(), {"--set", "measure.processes=" + std::to_string(req.rounds)});
  fp.quiet = req.quiet;
  const fresh_process_outcome climbed = run_fresh_processes(runs, fp);
  for (std::size_t i = 0; i < plans.size(); ++i) plans[i].run = runs[i];
  if (climbed.interrupted) throw interrupted_error();
  if (!writer) return climbed.code;

  std::vector<ladder_rung> rungs;
  const rung_plan* previous = nullptr;
  for (const auto& r : plans) {
    rungs.push_back(table_row(r, previous));
    if (r.as_set) previous = &r;
  }
  const std::string md = ladder_markdown(rungs) + "\n" + how_measured(req) + "\n";
  write_file_atomic(out / "ladder.md", md);
  write_file_atomic(out / "ladder.svg",
                    ladder_svg(rungs, "trainbench ladder: samples/s per rung", reference, reference_source));
  if (!req.quiet) std::cout << "\n" << md << "\n" << std::flush;
  log_result("wrote " + (out / "ladder.md").string() + " and ladder.svg; each rung's report beside them");
  for (const auto& r : rungs)
    if (!r.samples_per_s) return exit_code::failed;
  return climbed.code;
}

}  // namespace trainbench
