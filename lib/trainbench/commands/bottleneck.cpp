#include "trainbench/report/bottleneck.hpp"

#include <array>
#include <filesystem>
#include <iostream>

#include "trainbench/commands/commands.hpp"
#include "trainbench/commands/common.hpp"
#include "trainbench/measure/nvtx.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace trainbench {
namespace fs = std::filesystem;
namespace {

// The same step with no input pipeline: one batch made once on the device and reused.
profile ceiling_profile(profile p, std::int64_t batch) {
  p.description = "compute ceiling of " + p.name + ": the same step on one device batch, made once and reused";
  p.name += "-ceiling";
  p.data.source = data_source::device_synthetic;
  p.data.workers = 0;
  p.data.pin_memory = false;
  p.data.preprocess = preprocess_place::host;
  p.data.fallback = data_fallback::none;
  p.transfer = transfer_config{};
  p.train.batch_size = static_cast<int>(batch);
  p.train.batch_size_auto = false;
  if (!p.measure.trace.empty()) {
    // Beside the loop's trace: name-ceiling.json for name.json.
    const fs::path t(p.measure.trace);
    p.measure.trace = (t.parent_path() / (t.stem().string() + "-ceiling" + t.extension().string())).string();
  }
  return p;
}

// One side of the comparison: its profile, pipeline, runner and report.
struct bottleneck_side {
  std::string file;  // report file name in the output folder
  report_input in;
  std::optional<pipeline> pipe;
  std::unique_ptr<runner> run;
};

void prepare_side(bottleneck_side& s, const loaded_profile& lp, const profile& p, const bottleneck_request& req,
                  const build_options& bo, int& code) {
  s.in.prof = p;
  s.in.profile_path = lp.path.string();
  s.in.context = host_context(req.command_line);
  s.pipe = build_for_report(lp, p, bo, s.in, code);
  s.in.context = full_context(req.command_line, s.in.effective, p);
  if (!s.pipe) return;
  log_settings(p, s.in.effective);
  // Batches the loader and the copy ring prefetched while the other side ran would come for
  // free at the start of this side's next window: each round's warmup consumes them.
  measure_config m = p.measure;
  const int prefetched =
      (s.pipe->loader ? s.pipe->loader->slots() : 0) + (s.pipe->transfer ? s.pipe->transfer->lookahead() : 0);
  m.warmup_batches = std::max(m.warmup_batches, prefetched);
  // Kernel families are a run's figure: here every round would profile a window more, and after
  // one side's profiler session CUPTI 13.0 may record nothing of a graph the other side captures.
  m.kernel_families = false;
  s.run = std::make_unique<runner>(*s.pipe, m, make_progress(req.quiet));
}

// Rounds in ABBA order (loop, ceiling, ceiling, loop, ...) so a drift hits both sides alike.
int run_rounds(std::array<bottleneck_side, 2>& sides, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      bottleneck_side& s = sides[static_cast<std::size_t>(r % 2 == 0 ? k : 1 - k)];
      log_info("round " + std::to_string(r + 1) + "/" + std::to_string(rounds) + ": " + s.in.prof.name);
      // Both sides' runners name their ranges alike: this one says whose turn it is.
      nvtx_range turn(s.in.prof.measure.nvtx != nvtx_level::off, s.in.prof.name.c_str());
      try {
        s.run->run();
      } catch (...) {
        s.in.result = s.run->result();
        return record_failure(s.in);
      }
    }
  }
  return exit_code::ok;
}

// A side that was fine when the other failed stopped early too: its report must not say "ok".
void share_failure(bottleneck_side& s, const bottleneck_side& other) {
  if (s.in.status != "ok" || other.in.status == "ok") return;
  s.in.status = other.in.status;
  s.in.error_kind = other.in.error_kind;
  s.in.error_message = "stopped because " + other.in.prof.name + " failed: " + other.in.error_message;
}

void finish_side(bottleneck_side& s, const std::string& other, int rounds, int& code) {
  if (s.run) s.in.result = s.run->result();
  if (s.pipe && s.pipe->trace) code = close_trace(*s.pipe->trace, s.in, code);
  if (s.in.status != "ok") s.in.result.stopped_by = s.in.status;  // "error" or "interrupted"
  // The report holds every round's windows (with noise-based stopping, rounds may differ).
  if (!s.in.result.windows.empty()) {
    s.in.prof.measure.repeats = static_cast<int>(s.in.result.windows.size());
    s.in.prof.measure.max_repeats = 0;
  }
  if (!other.empty())
    s.in.effective.notes.push_back("bottleneck: measured in one process, interleaved with " + other + " (" +
                                   std::to_string(rounds) + " rounds)");
  auto& mem = s.in.result.memory;
  if (mem.device_peak_allocated_bytes) {
    mem.device_peak_allocated_bytes.reset();
    mem.device_peak_reserved_bytes.reset();
    s.in.effective.notes.push_back("results.memory: device peaks not recorded: both sides share the device");
  }
}

double stage_median(const run_result& r, const char* stage) {
  auto it = r.stages_s.find(stage);
  return it == r.stages_s.end() || it->second.empty() ? 0.0 : quantile(it->second, 0.5);
}

bottleneck_input verdict_input(const std::array<bottleneck_side, 2>& sides, int rounds) {
  bottleneck_input b;
  for (const auto& w : sides[0].in.result.windows) b.loop.push_back(w.samples_per_s);
  for (const auto& w : sides[1].in.result.windows) b.ceiling.push_back(w.samples_per_s);
  const run_result& loop = sides[0].in.result;
  b.data_wait_s = stage_median(loop, "data_wait");
  b.h2d_s = stage_median(loop, "h2d");
  b.batch_s = stage_median(loop, "batch");
  b.cuda = sides[0].in.effective.device.rfind("cuda", 0) == 0;
  b.rounds = rounds;
  return b;
}

}  // namespace

int bottleneck_command(const bottleneck_request& req) {
  loaded_profile lp = load_profile(req.config, req.sets);
  if (!req.trace.empty()) lp.value.measure.trace = req.trace;
  const profile& p = lp.value;
  if (p.data.source == data_source::device_synthetic)
    throw config_error(origin_of(lp, "data.source"), "data.source",
                       "is device-synthetic already: there is no input pipeline to measure against the step alone");
  if (req.rounds < 1) throw input_error("bottleneck: --rounds must be at least 1, got " + std::to_string(req.rounds));
  if (req.threshold_pct < 0) throw input_error("bottleneck: --threshold must be >= 0");
  if (req.alpha <= 0 || req.alpha >= 1) throw input_error("bottleneck: --alpha must be in (0, 1)");
  if (read_launch(process_environment()).launcher != "none")
    throw input_error("bottleneck runs in one process; start it without torchrun or srun");
  const fs::path out = req.out.empty() ? fs::path("reports/bottleneck") / p.name : fs::path(req.out);
  check_writable_folder(out, "--out");
  if (!p.measure.trace.empty()) {
    const std::string what = req.trace.empty() ? "measure.trace" : "--trace";
    check_writable_file(replace_all(p.measure.trace, "{rank}", "0"), what);
    check_writable_file(replace_all(ceiling_profile(p, 1).measure.trace, "{rank}", "0"), what);
  }
  fs::remove(out / "bottleneck.json");  // never leave an earlier verdict beside new reports
  set_log_quiet(req.quiet);
  install_interrupt_handler();

  std::array<bottleneck_side, 2> sides;
  sides[0].file = "loop.json";
  sides[0].in.measurement = "bottleneck-loop";
  sides[1].file = "ceiling.json";
  sides[1].in.measurement = "bottleneck-ceiling";
  int code = exit_code::ok;
  prepare_side(sides[0], lp, p, req, build_options{}, code);
  if (sides[0].pipe) {
    // The ceiling's one batch in the dtype the loop's batches arrive in: fp16/bf16 where the
    // device decode writes them under autocast, so neither side pays a cast the other does not.
    build_options ceiling;
    ceiling.synthetic_as_decoded = sides[0].in.effective.decode == "device";
    prepare_side(sides[1], lp, ceiling_profile(p, sides[0].pipe->batch_size), req, ceiling, code);
  }
  if (code == exit_code::ok) code = run_rounds(sides, req.rounds);
  share_failure(sides[0], sides[1]);
  share_failure(sides[1], sides[0]);
  finish_side(sides[0], sides[1].pipe ? sides[1].in.prof.name : "", req.rounds, code);
  finish_side(sides[1], p.name, req.rounds, code);
  for (const auto& s : sides)
    if (&s == &sides[0] || sides[0].pipe) write_file_atomic(out / s.file, make_report(s.in).dump(2) + "\n");
  if (code != exit_code::ok) {
    for (const auto& s : sides)
      if (s.in.status != "ok") log_error(s.in.prof.name + ": " + s.in.status + ": " + s.in.error_message);
    return code;
  }
  for (const auto& s : sides) warn_about_result(s.in);
  const bottleneck_input b = verdict_input(sides, req.rounds);
  const bottleneck_finding f = judge_bottleneck(b, p, req.threshold_pct, req.alpha);
  write_file_atomic(out / "bottleneck.json", bottleneck_json(f, b, p.name).dump(2) + "\n");
  if (!req.quiet) {
    std::cout << format_bottleneck(f, b, p.name);
    for (const auto& n : sides[0].in.effective.notes) std::cout << "  note        " << n << "\n";
  }
  log_result("reports written to " + out.string() + "/{loop,ceiling,bottleneck}.json");
  return exit_code::ok;
}

}  // namespace trainbench
