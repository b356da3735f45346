// trainbench ladder: every rung measured in fresh processes, the rungs interleaved in rounds, and
// the article's table and chart from the pooled windows (no torch here: the runs are children).
#include "trainbench/report/ladder.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>

#include "trainbench/commands/commands.hpp"
#include "trainbench/config/profile_diff.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/distributed/ladder_store.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/util/child_process.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
namespace {

struct rung_plan {
  std::string file, stem;
  fs::path report, state;
  std::optional<profile> as_set;  // with the ladder's --set (a profile that cannot load stops the ladder)
  std::string file_yaml;          // without them: what the file, and so its description, says
  std::string refused;            // why a round refused it (exit 2): it is not run again
  int rounds_done = 0;
  bool failed = false;
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
    r.file = file;
    r.stem = fs::path(file).stem().string();
    r.report = out / (r.stem + ".json");
    r.state = out / "rounds" / (r.stem + ".json");
    try {
      r.as_set = load_profile(file, req.sets).value;
      r.file_yaml = to_yaml(load_profile(file).value);
    } catch (const config_error& e) {
      refused.emplace_back(r.stem, e.what());
    } catch (const input_error& e) {
      refused.emplace_back(r.stem, e.what());
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

// Rung order in one round: as given, or a fresh shuffle per round (the same on every rank).
std::vector<std::size_t> round_order(std::size_t rungs, int round, const ladder_request& req) {
  std::vector<std::size_t> order(rungs);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (req.shuffle) {
    std::mt19937_64 rng(req.shuffle_seed * 1000003ULL + static_cast<std::uint64_t>(round));
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

std::vector<std::string> run_arguments(const rung_plan& r, const ladder_request& req) {
  std::vector<std::string> argv{self_executable(), "run", "--config", r.file};
  for (const auto& s : req.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--out", r.report.string(), "--pool-state", r.state.string()});
  if (req.quiet) argv.push_back("--quiet");
  return argv;
}

// Rungs the ladder did not finish say so, whatever their last round said: `error` is the error
// that stopped the ladder itself, none for a signal.
void mark_unfinished(const rung_plan& r, int rounds, const std::optional<std::string>& error) {
  if (r.rounds_done >= rounds || !fs::exists(r.report)) return;
  auto j = nlohmann::ordered_json::parse(read_text_file(r.report));
  if (j["status"] != "ok") return;
  const bool signal = !error;
  const std::string after =
      " after " + std::to_string(r.rounds_done) + " of " + std::to_string(rounds) + " rounds of this rung";
  j["status"] = signal ? "interrupted" : "error";
  j["error"] = {
      {"kind", signal ? "interrupted" : "runtime"},
      {"message", signal ? "the ladder was interrupted" + after : "the ladder stopped" + after + ": " + *error}};
  j["results"]["stopped_by"] = signal ? "interrupted" : "error";
  write_file_atomic(r.report, j.dump(2) + "\n");
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
    rung.no_effect.push_back("the same work as " + previous->stem +
                             (overrides.empty() ? "" : " once --set is applied"));
    rung.without_effect = true;
  }
}

ladder_rung table_row(const rung_plan& r, const rung_plan* previous) {
  ladder_rung rung;
  rung.rung = r.stem;
  if (!r.refused.empty()) {
    rung.failure = r.refused;
    return rung;
  }
  rung.change = r.as_set->description;
  if (!fs::exists(r.report)) {
    rung.failure = "no report (the run stopped before writing one; see its log above)";
    return rung;
  }
  const auto j = read_reports(r.report.string()).front();
  rung.change = j["profile"].value("description", rung.change);
  for (const auto& w : j["results"]["repeats"]) rung.windows.push_back(w["samples_per_s"].get<double>());
  if (j["status"] != "ok")
    rung.failure = j["error"].value("message", "failed");
  else if (!rung.windows.empty())
    rung.samples_per_s = j["results"]["samples_per_s"]["median"].get<double>();
  describe_as_run(rung, r, previous, j);
  return rung;
}

void clear_earlier_results(const std::vector<rung_plan>& plans) {
  for (const auto& r : plans) {
    fs::remove(r.report);
    fs::remove(r.state);
  }
}

// Under torchrun or srun, every rank's runs of one rung and round meet under the same keys.
void set_store_prefix(int round, std::size_t rung) {
  const std::string prefix = "ladder/round_" + std::to_string(round) + "/rung_" + std::to_string(rung);
  setenv(ladder_store_variable, prefix.c_str(), 1);
}

std::string how_measured(const ladder_request& req) {
  std::string order =
      req.shuffle ? "in a new random order every round (--shuffle-seed " + std::to_string(req.shuffle_seed) + ")"
                  : "in the order listed";
  return "Each rung ran " + std::to_string(req.rounds) + " round(s), each round a fresh process, the rungs " + order +
         "; samples/s is the median of all its rounds' windows, the interval of a step its 95% interval.";
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

// Every round of every rung, each a fresh process; a rung that fails is not run again.
void climb(std::vector<rung_plan>& plans, const ladder_request& req, held_signals& held, bool& interrupted, int& code) {
  for (int round = 1; round <= req.rounds && !interrupted; ++round) {
    for (std::size_t i : round_order(plans.size(), round, req)) {
      rung_plan& r = plans[i];
      if (r.failed) continue;
      if ((interrupted = interrupt_pending(held))) break;
      if (!req.quiet) std::cout << "== " << r.stem << " (round " << round << "/" << req.rounds << ")\n" << std::flush;
      set_store_prefix(round, i);
      const child_exit e = run_self(run_arguments(r, req), held);
      if ((interrupted = e.interrupted || e.code == exit_code::interrupted)) break;
      // Decided from exit codes, which every rank sees alike, so all ranks skip the same rungs.
      if (e.code != exit_code::ok) {
        r.failed = true;
        code = exit_code::failed;
        if (e.code == exit_code::bad_input) r.refused = "refused (exit 2): see the run's message above";
      } else {
        ++r.rounds_done;
      }
    }
  }
}

}  // namespace

int ladder_command(const ladder_request& req) {
  if (req.rounds < 1) throw input_error("ladder: --rounds must be at least 1, got " + std::to_string(req.rounds));
  const fs::path out = req.out.empty() ? default_out(req.inputs) : fs::path(req.out);
  const launch_info launch = read_launch(process_environment());
  // Under torchrun or srun every rank climbs the ladder; rank 0 alone writes reports and the table.
  const bool writer = launch.rank == 0;
  std::vector<rung_plan> plans = plan_rungs(req, out);  // first: a profile that cannot load is listed with the others
  std::string reference_source;
  const ladder_reference reference = find_reference(req, reference_source);
  if (writer) check_writable_folder(out, "--out");
  set_log_quiet(req.quiet);
  if (writer) clear_earlier_results(plans);

  held_signals held;  // before the store's threads start, so they inherit it
  const ladder_store store(launch);
  bool interrupted = false;
  int code = exit_code::ok;
  try {
    climb(plans, req, held, interrupted, code);
  } catch (const std::exception& e) {
    // The ladder itself failed (a rung could not start, the ranks' store timed out): the rungs it
    // did not finish must not read as finished with fewer rounds.
    if (writer)
      for (const auto& r : plans) mark_unfinished(r, req.rounds, e.what());
    throw;
  }
  if (!writer) {
    if (interrupted) throw interrupted_error();
    return code;
  }
  if (interrupted) {
    for (const auto& r : plans) mark_unfinished(r, req.rounds, std::nullopt);
    throw interrupted_error();
  }
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
  return code;
}

}  // namespace trainbench
