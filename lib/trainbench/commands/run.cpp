#include <filesystem>
#include <iostream>

#include "trainbench/commands/commands.hpp"
#include "trainbench/commands/common.hpp"
#include "trainbench/distributed/rank_merge.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/report/pooling.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;

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

// Every rank sends its windows to every other; all end up with the job's figures.
void gather_ranks(pipeline& pipe, run_result& r) {
  // With noise-based stopping the count exceeds measure.repeats, but it is the same on every rank.
  const int windows = static_cast<int>(r.windows.size());
  const auto all = pipe.group->all_gather(pack_rank(r, windows));
  merge_ranks(r, all, windows);
  dist_result& d = *r.dist;
  if (d.baseline_samples_per_s && !r.windows.empty()) {
    std::vector<double> rates;
    for (const auto& w : r.windows) rates.push_back(w.samples_per_s);
    d.scaling_efficiency = summarize(rates).median / (d.world * *d.baseline_samples_per_s);
  }
}

// A ladder's round: this run's measurements join the rounds before it (the state file), and the
// report holds them all.
report_input pooled_input(const report_input& in, const std::string& state) {
  if (state.empty()) return in;
  std::vector<run_result> rounds = read_rounds(state);
  rounds.push_back(in.result);
  write_rounds(state, rounds);
  report_input out = in;
  out.result = pool_rounds(rounds);
  out.effective.notes.push_back("ladder: the windows of " + std::to_string(rounds.size()) +
                                " round(s), each a fresh process, the rungs interleaved");
  return out;
}

// bench-data: a loader batch takes microseconds where a training step takes milliseconds, so
// the windows a profile sets for its step would time little more than a clock read.
constexpr double loader_min_window_s = 0.1;  // the note in run_command says 0.1

}  // namespace

int run_command(const run_request& req) {
  // Bad input (profile, data, switches refused by --strict) is found before anything is
  // written: exit 2, no report.
  loaded_profile lp = load_profile(req.config, req.sets);
  if (!req.trace.empty()) lp.value.measure.trace = req.trace;
  const bool loader_floor = req.data_only && lp.value.measure.min_window_s == 0;
  if (loader_floor) lp.value.measure.min_window_s = loader_min_window_s;
  const profile& p = lp.value;
  build_options bo;
  bo.strict = req.strict;
  bo.with_step = !req.data_only;
  bo.launch = read_launch(process_environment());
  // In a data-parallel job rank 0 writes the report; the others only where the path has {rank}.
  const std::string path_template = req.out.empty() ? report_path_for(p) : req.out;
  const std::string report_path = replace_all(path_template, "{rank}", std::to_string(bo.launch.rank));
  const bool writes_report = bo.launch.rank == 0 || path_template.find("{rank}") != std::string::npos;
  if (writes_report)
    check_writable_folder(fs::path(report_path).parent_path(), req.out.empty() ? "report.path" : "--out");
  std::optional<double> baseline;
  if (!req.baseline.empty()) baseline = baseline_rate(req.baseline, p);
  set_log_quiet(req.quiet || bo.launch.rank != 0);

  report_input in;
  in.prof = p;
  in.profile_path = lp.path.string();
  in.context = host_context(req.command_line);
  install_interrupt_handler();
  int code = exit_code::ok;
  std::optional<pipeline> pipe = build_for_report(lp, p, bo, in, code);
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
    if (pipe->trace) code = close_trace(*pipe->trace, in, code);
    if (code != exit_code::ok) in.result.stopped_by = in.status;  // "error" or "interrupted"
    if (code == exit_code::ok && !req.save_weights.empty() && pipe->step) {
      const std::string file = replace_all(req.save_weights, "{rank}", std::to_string(bo.launch.rank));
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
      try {
        if (code == exit_code::ok) gather_ranks(*pipe, in.result);
      } catch (...) {
        code = record_failure(in);
      }
    }
  }
  if (writes_report) write_file_atomic(report_path, make_report(pooled_input(in, req.pool_state)).dump(2) + "\n");
  if ((!req.quiet && bo.launch.rank == 0) || code != exit_code::ok) print_summary(in);
  if (bo.launch.rank == 0) warn_about_result(in);
  if (code != exit_code::ok) log_error(in.status + ": " + in.error_message);
  // Under a ladder (a pool state), the ladder says where its reports are.
  if (writes_report) (req.pool_state.empty() ? log_result : log_info)("report written to " + report_path);
  return code;
}

}  // namespace trainbench
