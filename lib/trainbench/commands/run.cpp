#include <chrono>
#include <iostream>

#include "trainbench/commands/commands.hpp"
#include "trainbench/commands/common.hpp"
#include "trainbench/commands/fresh_processes.hpp"
#include "trainbench/distributed/host_address.hpp"
#include "trainbench/distributed/rank_merge.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/report/pooling.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {

namespace {

void describe_dist(const pipeline& pipe, const profile& p, const run_request& req, std::optional<double> baseline,
                   dist_result& d) {
  const launch_info& l = pipe.group->launch();
  d.backend = pipe.group->backend_name();
  d.launcher = l.launcher;
  d.world = l.world;
  d.rank = l.rank;
  d.local_world = l.local_world;
  d.global_batch_size = pipe.batch_size * l.world;
  d.bucket_cap_mb = p.dist.bucket_mb;
  if (pipe.sync) d.bucket_bytes = pipe.sync->bucket_bytes();
  d.baseline_samples_per_s = baseline;
  if (baseline) d.baseline_report = req.baseline;
  d.hosts = pipe.group->hosts();  // known since the rendezvous: a failed run's report names them too
}

// Every rank hands in its windows and how its run ended, failed or not, and all end up with the
// job's figures; a rank whose own run went well fails when another's did, naming it and its
// error. When the ranks cannot be gathered (a collective broke, a peer is lost, a signal), the
// report keeps this rank's windows and says that they are one rank's (ranks_in_results).
int gather_ranks(pipeline& pipe, report_input& in, int code) {
  run_result& r = in.result;
  dist_result& d = *r.dist;
  d.ranks_in_results = 1;
  const auto note_one_rank = [&] {
    in.effective.notes.push_back("the ranks' measurements could not be gathered: the results are rank " +
                                 std::to_string(d.rank) + "'s alone (1 of " + std::to_string(d.world) + " ranks)");
  };
  rank_outcome mine{code != exit_code::ok, code != exit_code::ok ? in.error_message : "",
                    pack_rank(r, static_cast<int>(r.windows.size()))};
  std::vector<rank_outcome> all;
  try {
    all = pipe.group->exchange_outcomes(mine, pipe.group->links_intact());
  } catch (...) {
    note_one_rank();
    if (code != exit_code::ok) return code;  // this rank's own error comes first
    const int failed = record_failure(in);
    r.stopped_by = in.status;
    return failed;
  }
  if (all.empty()) {
    note_one_rank();
    return code;
  }
  std::vector<std::vector<double>> packed;
  for (const auto& o : all) packed.push_back(o.packed);
  merge_ranks(r, packed);
  if (d.baseline_samples_per_s && !r.windows.empty()) {
    std::vector<double> rates;
    for (const auto& w : r.windows) rates.push_back(w.samples_per_s);
    d.scaling_efficiency = summarize(rates).median / (d.world * *d.baseline_samples_per_s);
  }
  if (code != exit_code::ok) return code;
  std::string others;
  for (std::size_t rank = 0; rank < all.size(); ++rank)
    if (all[rank].failed)
      others += (others.empty() ? "" : "; ") + rank_at(static_cast<int>(rank), d.hosts) + " failed: " + all[rank].error;
  if (others.empty()) return code;
  try {
    throw run_error("dist", others);
  } catch (...) {
    const int failed = record_failure(in);
    r.stopped_by = in.status;
    return failed;
  }
}

// One of several fresh processes (run --processes, a ladder's rounds): this run's measurements
// join the processes before it (the state file), and the report holds them all.
report_input pooled_input(const report_input& in, const std::string& state) {
  if (state.empty()) return in;
  std::vector<run_result> rounds = read_rounds(state);
  rounds.push_back(in.result);
  write_rounds(state, rounds);
  report_input out = in;
  out.result = pool_rounds(rounds);
  out.effective.notes.push_back("the windows of " + std::to_string(rounds.size()) +
                                " fresh process(es) of this profile");
  return out;
}

// bench-data: a loader batch takes microseconds where a training step takes milliseconds, so
// the windows a profile sets for its step would time little more than a clock read.
constexpr double loader_min_window_s = 0.1;  // the note in run_command says 0.1

// One process, one entry: a run that never reached its first window still counts as a process
// (so a pooled report's process count says how many ran), its costs as far as it got.
void record_process_cost(run_result& r, std::optional<double> build_s) {
  if (r.processes.empty()) r.processes.emplace_back();
  r.processes.front().build_s = build_s;
}

// The file this rank writes for an output path: {rank} becomes the rank; without it, rank 0
// alone writes (`all_ranks`: every rank, to the same name). Empty: this rank writes none.
std::string rank_file(const std::string& path, int rank, bool all_ranks = false) {
  if (path.empty() || (rank != 0 && !all_ranks && path.find("{rank}") == std::string::npos)) return "";
  return replace_all(path, "{rank}", std::to_string(rank));
}

// Every file the run will write, checked before anything runs (a measurement of minutes must
// not end in a path that cannot be written).
void check_outputs(const run_request& req, const profile& p, int rank, const std::string& report_path,
                   const std::string& weights_file) {
  if (!report_path.empty()) check_writable_file(report_path, req.out.empty() ? "report.path" : "--out");
  const std::string trace = rank_file(p.measure.trace, rank);
  if (!trace.empty()) check_writable_file(trace, req.trace.empty() ? "measure.trace" : "--trace");
  const std::string weights = rank_file(weights_file, rank, true);
  if (!weights.empty()) check_writable_file(weights, "--save-weights");
}

}  // namespace

int run_command(const run_request& req) {
  TB_ASSERT(!req.configs.empty(), "run without a profile");
  if (req.processes < 0) throw input_error("--processes must be at least 1, got " + std::to_string(req.processes));
  // Bad input (profile, data, switches refused by --strict) is found before anything is
  // written: exit 2, no report.
  loaded_profile lp = load_profile(req.configs.front(), req.sets);
  const int processes = req.processes > 0 ? req.processes : lp.value.measure.processes;
  if (req.pool_state.empty() && (req.configs.size() > 1 || processes > 1)) return run_processes_command(req);
  if (!req.trace.empty()) lp.value.measure.trace = req.trace;
  lp.value.measure.trace = process_file(lp.value.measure.trace, req.process);
  const std::string weights_file = process_file(req.save_weights, req.process);
  const bool loader_floor = req.data_only && lp.value.measure.min_window_s == 0;
  if (loader_floor) lp.value.measure.min_window_s = loader_min_window_s;
  const profile& p = lp.value;
  build_options bo;
  bo.strict = req.strict;
  bo.with_step = !req.data_only;
  bo.launch = read_launch(process_environment());
  // In a data-parallel job rank 0 writes the report; the others only where the path has {rank}.
  const std::string path_template = req.out.empty() ? report_path_for(p, req.data_only) : req.out;
  const std::string report_path = rank_file(path_template, bo.launch.rank);
  const bool writes_report = !report_path.empty();
  check_outputs(req, p, bo.launch.rank, report_path, weights_file);
  std::optional<double> baseline;
  if (!req.baseline.empty()) baseline = baseline_rate(req.baseline, p);
  set_log_quiet(req.quiet || bo.launch.rank != 0);

  report_input in;
  in.measurement = req.data_only ? "bench-data" : "run";
  in.prof = p;
  in.profile_path = lp.path.string();
  in.context = host_context(req.command_line);
  install_interrupt_handler();
  int code = exit_code::ok;
  const auto build_started = std::chrono::steady_clock::now();
  std::optional<pipeline> pipe = build_for_report(lp, p, bo, in, code);
  std::optional<double> build_s;
  if (pipe) build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - build_started).count();
  in.context = full_context(req.command_line, in.effective, p);
  if (loader_floor)
    in.effective.notes.push_back(
        "bench-data: measure.min_window_s 0 taken as 0.1 s (windows of a few loader "
        "batches would time the clock more than the loader)");
  if (pipe) {
    log_settings(p, in.effective);
    runner run(*pipe, p.measure, make_progress(req.quiet || bo.launch.rank != 0));
    try {
      run.run();
    } catch (...) {
      code = record_failure(in);
    }
    in.result = run.result();
    record_process_cost(in.result, build_s);
    if (pipe->trace) code = close_trace(*pipe->trace, in, code);
    if (code != exit_code::ok) in.result.stopped_by = in.status;  // "error" or "interrupted"
    if (code == exit_code::ok && !weights_file.empty() && pipe->step) {
      const std::string file = replace_all(weights_file, "{rank}", std::to_string(bo.launch.rank));
      try {
        save_weights(*pipe->step->model(), file);
        log_info("weights written to " + file);
      } catch (...) {
        code = record_failure(in);  // the measurements stand; the report says what failed
      }
    }
    if (pipe->group) {
      in.result.dist.emplace();
      describe_dist(*pipe, p, req, baseline, *in.result.dist);
      code = gather_ranks(*pipe, in, code);
    }
  }
  if (!pipe) record_process_cost(in.result, std::nullopt);
  // With a pool state (the processes of run --processes, a ladder's rounds) the report and the
  // console give every process so far; the error line below says what this one did. Only a rank
  // that writes a report pools: the others' windows are in rank 0's already (gather_ranks).
  const report_input pooled = pooled_input(in, writes_report ? req.pool_state : "");
  if (writes_report) write_file_atomic(report_path, make_report(pooled).dump(2) + "\n");
  if ((!req.quiet && bo.launch.rank == 0) || code != exit_code::ok) print_summary(pooled);
  if (bo.launch.rank == 0) warn_about_result(pooled);
  if (code != exit_code::ok) log_error(in.status + ": " + in.error_message);
  // Under a ladder (a pool state), the ladder says where its reports are.
  if (writes_report) (req.pool_state.empty() ? log_result : log_info)("report written to " + report_path);
  return code;
}

}  // namespace trainbench
