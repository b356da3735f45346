#include "trainbench/commands/fresh_processes.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "trainbench/commands/commands.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/distributed/ladder_store.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
namespace {

// Profile order in one round: as given, or a fresh shuffle per round (the same on every rank).
std::vector<std::size_t> round_order(std::size_t count, int round, const fresh_process_request& req) {
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (req.shuffle) {
    std::mt19937_64 rng(req.shuffle_seed * 1000003ULL + static_cast<std::uint64_t>(round));
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

std::vector<std::string> run_arguments(const process_series& s, const fresh_process_request& req, int round) {
  std::vector<std::string> argv{self_executable(), req.command, "--config", s.file};
  argv.insert(argv.end(), req.child_arguments.begin(), req.child_arguments.end());
  argv.insert(argv.end(), {"--out", s.report.string(), "--pool-state", s.state.string()});
  // Each process names its own trace and weights (process_file), so none overwrites another's.
  if (req.processes > 1) argv.insert(argv.end(), {"--process", std::to_string(round)});
  if (req.quiet || (req.summary_last_only && round != req.processes)) argv.push_back("--quiet");
  return argv;
}

// Under torchrun or srun, every rank's runs of one profile and round meet under the same keys.
void set_store_prefix(int round, std::size_t index) {
  const std::string prefix = "processes/round_" + std::to_string(round) + "/series_" + std::to_string(index);
  setenv(ladder_store_variable, prefix.c_str(), 1);
}

nlohmann::ordered_json read_report(const fs::path& report) {
  return nlohmann::ordered_json::parse(read_text_file(report));
}

void mark_failed(nlohmann::ordered_json& j, const std::string& status, const std::string& kind,
                 const std::string& message) {
  j["status"] = status;
  j["error"] = {{"kind", kind}, {"message", message}};
  j["results"]["stopped_by"] = status;
}

// Reports the run did not finish say so, whatever their last process said: `error` is the error
// that stopped the run itself, none for a signal.
void mark_unfinished(const process_series& s, int processes, const std::optional<std::string>& error) {
  if (s.done >= processes || !fs::exists(s.report)) return;
  auto j = read_report(s.report);
  if (j["status"] != "ok") return;
  const std::string after =
      " after " + std::to_string(s.done) + " of " + std::to_string(processes) + " processes of this profile";
  if (error)
    mark_failed(j, "error", "runtime", "the run stopped" + after + ": " + *error);
  else
    mark_failed(j, "interrupted", "interrupted", "interrupted" + after);
  write_file_atomic(s.report, j.dump(2) + "\n");
}

// Rank 0 clears the reports; every rank its own state file.
void clear_earlier_results(const std::vector<process_series>& series, bool writer) {
  for (const auto& s : series) {
    if (writer) fs::remove(s.report);
    fs::remove(s.state);
  }
}

// Decided from the exit code the ranks agreed on (agreed_exit), so all ranks skip the same series.
void record_exit(process_series& s, const child_exit& e, int processes, bool writer, int& code) {
  if (e.code == exit_code::ok) {
    ++s.done;
    return;
  }
  s.failed = true;
  code = exit_code::failed;
  if (e.code == exit_code::bad_input) s.refused = "refused (exit 2): see the run's message above";
  if (writer && mark_crashed(s.report, s.done + 1, processes, e))
    s.crashed = "process " + std::to_string(s.done + 1) + " of " + std::to_string(processes) + " " + describe_exit(e) +
                " before writing its report";
}

// The outcome every rank takes for a process: its own when it failed or was interrupted, else
// another rank's failure (exit 1: this rank's run went well, the job's did not). Any rank's
// interruption stops every rank, a failed one too. Only rank 0 writes reports, so a report it
// could not write fails its run alone; without agreeing, the ranks would go on to run different
// processes, each waiting for the others in vain.
child_exit agreed_exit(ladder_store& store, const std::string& step, const child_exit& mine) {
  const int code = mine.interrupted ? exit_code::interrupted : mine.code;
  const std::vector<int> all = store.agree(step, code);
  child_exit out = mine;
  for (int other : all)
    if (other == exit_code::interrupted) out.interrupted = true;
    else if (other != exit_code::ok && code == exit_code::ok) out.code = exit_code::failed;
  return out;
}

void run_rounds(std::vector<process_series>& series, const fresh_process_request& req, const held_signals& held,
                ladder_store& store, bool writer, fresh_process_outcome& out) {
  for (int round = 1; round <= req.processes && !out.interrupted; ++round) {
    for (std::size_t i : round_order(series.size(), round, req)) {
      process_series& s = series[i];
      if (s.failed) continue;
      if ((out.interrupted = interrupt_pending(held))) break;
      if (!req.quiet)
        std::cout << "== " << s.stem << " (process " << round << "/" << req.processes << ")\n" << std::flush;
      set_store_prefix(round, i);
      const child_exit mine = run_self(run_arguments(s, req, round), held);
      const child_exit e = agreed_exit(store, "round_" + std::to_string(round) + "/series_" + std::to_string(i), mine);
      out.interrupted = e.interrupted || e.code == exit_code::interrupted;
      // This rank's own failure is recorded even when another rank's interruption stops the ladder.
      const bool failed_here = !mine.interrupted && mine.code != exit_code::ok && mine.code != exit_code::interrupted;
      if (!out.interrupted || failed_here) record_exit(s, e, req.processes, writer, out.code);
      if (out.interrupted) break;
    }
  }
}

}  // namespace

std::string describe_exit(const child_exit& e) {
  if (e.signal != 0) {
    const char* name = strsignal(e.signal);
    return "was killed by signal " + std::to_string(e.signal) + (name ? " (" + std::string(name) + ")" : "");
  }
  return "ended with exit code " + std::to_string(e.code);
}

bool mark_crashed(const fs::path& report, int expected, int planned, const child_exit& e) {
  if (!fs::exists(report)) return true;  // not even the processes before it wrote one
  auto j = read_report(report);
  const auto& processes = j["results"]["processes"];
  const int recorded = processes.is_object() ? processes.value("count", 0) : 0;
  if (recorded >= expected) return false;  // the child wrote its report, failure included
  mark_failed(j, "error", "crashed",
              "process " + std::to_string(expected) + " of " + std::to_string(planned) + " " + describe_exit(e) +
                  " before writing its report; this report holds the " + std::to_string(recorded) +
                  " process(es) before it");
  write_file_atomic(report, j.dump(2) + "\n");
  return true;
}

std::string process_file(const std::string& path, int process) {
  if (path.empty() || process <= 0) return path;
  const std::string k = std::to_string(process);
  if (path.find("{process}") != std::string::npos) return replace_all(path, "{process}", k);
  const fs::path p(path);
  return (p.parent_path() / (p.stem().string() + "-process" + k + p.extension().string())).string();
}

fs::path rank_state_file(const fs::path& state, int rank, int world) {
  if (world <= 1) return state;
  const std::string r = std::to_string(rank);
  return state.parent_path() / (replace_all(state.stem().string(), "{rank}", r) + ".rank" + r + state.extension().string());
}

fresh_process_outcome run_fresh_processes(std::vector<process_series>& series, const fresh_process_request& req) {
  const launch_info launch = read_launch(process_environment());
  const bool writer = launch.rank == 0;
  // Under a launcher every rank runs every process, and a rank's process pools only where it
  // writes a report: each rank has a state file of its own, so no round is pooled twice.
  for (auto& s : series) s.state = rank_state_file(s.state, launch.rank, launch.world);
  clear_earlier_results(series, writer);
  held_signals held;  // before the store's threads start, so they inherit it
  ladder_store store(launch);
  fresh_process_outcome out;
  try {
    run_rounds(series, req, held, store, writer, out);
  } catch (const std::exception& e) {
    // The run itself failed (a child could not start, the ranks' store timed out): the reports
    // it did not finish must not read as finished with fewer processes.
    if (writer)
      for (const auto& s : series) mark_unfinished(s, req.processes, e.what());
    throw;
  }
  if (out.interrupted && writer)
    for (const auto& s : series) mark_unfinished(s, req.processes, std::nullopt);
  store.finish(out.interrupted);
  return out;
}

}  // namespace trainbench

namespace trainbench {
namespace {

// The report of one profile among several: its own report.path, or --out with {name} replaced.
std::string report_of(const run_request& req, const profile& p, std::size_t profiles) {
  if (req.out.empty()) return report_path_for(p, req.data_only);
  if (profiles > 1 && req.out.find("{name}") == std::string::npos)
    throw input_error("--out '" + req.out + "' with " + std::to_string(profiles) +
                      " profiles: every profile needs its own report; put {name} in the path, or leave --out "
                      "out (each profile's report.path)");
  return replace_all(req.out, "{name}", p.name);
}

std::vector<std::string> child_arguments(const run_request& req, int processes) {
  std::vector<std::string> out;
  for (const auto& s : req.sets) out.insert(out.end(), {"--set", s});
  // The report's profile says how many processes it pooled: with several profiles and no
  // --processes, every profile runs as many as the one that asks for most.
  out.insert(out.end(), {"--set", "measure.processes=" + std::to_string(processes)});
  if (req.strict) out.push_back("--strict");
  if (!req.trace.empty()) out.insert(out.end(), {"--trace", req.trace});
  if (!req.baseline.empty()) out.insert(out.end(), {"--baseline", req.baseline});
  if (!req.save_weights.empty()) out.insert(out.end(), {"--save-weights", req.save_weights});
  return out;
}

}  // namespace

int run_processes_command(const run_request& req) {
  // Every profile loads before any process starts: a bad one is exit 2 with nothing run.
  std::vector<process_series> series;
  int processes = req.processes;
  for (const auto& file : req.configs) {
    const profile p = load_profile(file, req.sets).value;
    if (req.processes == 0) processes = std::max(processes, p.measure.processes);
    process_series s;
    s.file = file;
    s.stem = p.name;
    s.report = report_of(req, p, req.configs.size());
    s.state = s.report.parent_path() / "processes" / s.report.filename();
    check_writable_folder(s.report.parent_path(), req.out.empty() ? "report.path" : "--out");
    series.push_back(s);
  }
  fresh_process_request fp;
  fp.command = req.data_only ? "bench-data" : "run";
  fp.processes = std::max(1, processes);
  fp.child_arguments = child_arguments(req, fp.processes);
  fp.quiet = req.quiet;
  fp.summary_last_only = true;
  set_log_quiet(req.quiet);
  const fresh_process_outcome done = run_fresh_processes(series, fp);
  if (done.interrupted) throw interrupted_error();
  for (const auto& s : series)
    if (!s.crashed.empty()) log_error(s.stem + ": " + s.crashed);
  if (read_launch(process_environment()).rank == 0)
    for (const auto& s : series)
      if (std::filesystem::exists(s.report))
        log_result(s.stem + ": " + std::to_string(s.done) + " of " + std::to_string(fp.processes) +
                   " processes pooled in " + s.report.string());
  return done.code;
}

}  // namespace trainbench
