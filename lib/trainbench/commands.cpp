#include "trainbench/commands.hpp"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/data/dataset.hpp"
#include "trainbench/dist/rank_merge.hpp"
#include "trainbench/measure/nvtx.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/report/bottleneck.hpp"
#include "trainbench/report/report.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/torch_compat.hpp"

namespace trainbench {
namespace fs = std::filesystem;

std::string version_text() {
  const cuda_versions v = cuda_library_versions();
  std::string text = "trainbench " + tool_version() + " (" + tool_git() + ")\n";
  text += std::string("LibTorch ") + compat::libtorch_version() + "\n";
  text += "CUDA " + std::string(cuda_code_compiled() ? "code compiled in" : "code not compiled") + "; runtime " +
          v.runtime + ", driver " + v.driver + ", cuDNN " + v.cudnn + "\n";
  text += nvtx_compiled_in() ? "NVTX: compiled in (domain 'trainbench')\n"
                             : "NVTX: compiled out (no NVTX3 headers found at build time)\n";
  return text;
}

int validate_command(const std::vector<std::string>& files) {
  int failures = 0;
  for (const auto& f : files) {
    try {
      load_profile(f);
      std::cout << f << ": ok\n";
    } catch (const config_error& e) {
      std::cout << e.what() << "\n";
      ++failures;
    }
  }
  return failures ? exit_code::bad_input : exit_code::ok;
}

int show_command(const std::string& config, const std::vector<std::string>& sets) {
  std::cout << to_yaml(load_profile(config, sets).value);
  return exit_code::ok;
}

int make_dataset_command(const std::string& kind, const std::string& out, long long samples, unsigned long long seed) {
  if (kind != "cifar10") throw input_error("make-dataset: unknown kind '" + kind + "'; allowed: cifar10");
  if (samples < 1) throw input_error("make-dataset: --samples must be >= 1");
  write_cifar10(out, samples, std::max(1LL, samples / 5), seed);
  std::cout << "wrote a random CIFAR-10-format dataset (" << samples << " train samples) to " << out << "\n";
  return exit_code::ok;
}

namespace {

context_info full_context(const std::string& command_line, const effective_settings& e, const profile& p) {
  context_info c = host_context(command_line);
  const cuda_versions v = cuda_library_versions();
  c.libtorch = compat::libtorch_version();
  c.cuda = v.runtime;
  c.cudnn = v.cudnn;
  c.nvtx = nvtx_compiled_in();
  if (e.device.rfind("cuda", 0) == 0) {
    const cuda_device_facts f = cuda_device_info(c10::Device(e.device));
    c.gpu = gpu_info{f.name, f.uuid, f.driver.empty() ? "unknown (no NVML)" : f.driver, f.memory_bytes};
  }
  const fs::path data_dir = p.data.path.empty() ? default_data_path(p.data.source) : fs::path(p.data.path);
  c.data_generated = p.data.source == data_source::cifar10 && fs::exists(data_dir / "GENERATED");
  return c;
}

std::string human_bytes(std::int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

void print_dist(const dist_result& d) {
  std::printf("  ranks        %d x %s (%s), global batch %lld, %zu gradient buckets\n", d.world, d.backend.c_str(),
              d.launcher.c_str(), static_cast<long long>(d.global_batch_size), d.bucket_bytes.size());
  for (const auto& rr : d.ranks) {
    std::vector<double> rates;
    for (const auto& w : rr.windows) rates.push_back(w.samples_per_s);
    if (rates.empty()) continue;
    std::printf("  rank %-7d median %.1f samples/s", rr.rank, summarize(rates).median);
    if (rr.allreduce_s_median) std::printf(", all-reduce wait %.3f ms", 1000.0 * *rr.allreduce_s_median);
    std::printf("\n");
  }
  if (d.scaling_efficiency)
    std::printf("  scaling      %.1f%% of %d x %.1f samples/s (%s)\n", 100.0 * *d.scaling_efficiency, d.world,
                *d.baseline_samples_per_s, d.baseline_report->c_str());
}

void print_summary(const report_input& in) {
  const auto& r = in.result;
  std::vector<double> rates;
  for (const auto& w : r.windows) rates.push_back(w.samples_per_s);
  std::printf("%s: %s on %s\n", in.prof.name.c_str(), in.status.c_str(), in.effective.device_name.c_str());
  if (!rates.empty()) {
    const summary s = summarize(rates);
    std::printf("  samples/s    median %.1f  (IQR %.1f - %.1f, %zu window%s)\n", s.median, s.q1, s.q3, s.n,
                s.n == 1 ? "" : "s");
  }
  for (int k = 0; k < stage_count; ++k) {
    auto it = r.stages_s.find(stage_name(static_cast<stage_id>(k)));
    if (it != r.stages_s.end())
      std::printf("  %-12s median %8.3f ms per batch\n", it->first.c_str(), 1000.0 * quantile(it->second, 0.5));
  }
  if (r.memory.device_peak_allocated_bytes)
    std::printf("  device peak  %s allocated, %s reserved\n",
                human_bytes(*r.memory.device_peak_allocated_bytes).c_str(),
                human_bytes(*r.memory.device_peak_reserved_bytes).c_str());
  if (r.memory.host_peak_rss_bytes)
    std::printf("  host peak    %s RSS\n", human_bytes(*r.memory.host_peak_rss_bytes).c_str());
  if (r.loss_first && r.loss_last) std::printf("  loss         %.4f -> %.4f\n", *r.loss_first, *r.loss_last);
  if (r.dist) print_dist(*r.dist);
  for (const auto& n : in.effective.notes) std::printf("  note: %s\n", n.c_str());
  std::fflush(stdout);
}

progress_fn make_progress(bool quiet) {
  if (quiet) return {};
  const bool tty = isatty(STDERR_FILENO) != 0;
  return [tty](const char* phase, std::int64_t done, std::int64_t total, double rate) {
    if (tty) {
      std::fprintf(stderr, "\r%-8s batch %lld/%lld", phase, static_cast<long long>(done),
                   static_cast<long long>(total));
      if (rate > 0) std::fprintf(stderr, "  last window %.1f samples/s", rate);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (done == total) {
      log_info(std::string(phase) + ": " + std::to_string(total) + " batches done");
    }
  };
}

// Fills the report's status from the exception in flight; returns the exit code.
int record_failure(report_input& in) {
  try {
    throw;
  } catch (const interrupted_error& e) {
    in.status = "interrupted";
    in.error_kind = "interrupted";
    in.error_message = e.what();
    return exit_code::interrupted;
  } catch (const run_error& e) {
    in.status = "error";
    in.error_kind = e.kind();
    in.error_message = e.what();
  } catch (const c10::OutOfMemoryError& e) {
    // Never shrink the batch silently (a "regression" that is really a smaller batch).
    in.status = "error";
    in.error_kind = "out_of_memory";
    in.error_message = "out of device memory at train.batch_size " + std::to_string(in.prof.train.batch_size) +
                       "; use train.batch_size: auto to find the largest batch that fits. " +
                       e.what_without_backtrace();
  } catch (const c10::Error& e) {
    in.status = "error";
    in.error_kind = "runtime";
    in.error_message = e.what_without_backtrace();  // the C++ stack trace helps nobody reading a report
  } catch (const std::exception& e) {
    in.status = "error";
    in.error_kind = "runtime";
    in.error_message = e.what();
  }
  return exit_code::failed;
}

// Bad input (profile, data, switches refused by --strict) is rethrown naming the profile's file:
// exit 2, no report. Any other failure is recorded in the report and leaves no pipeline.
std::optional<pipeline> build_for_report(const loaded_profile& lp, const profile& p, const build_options& bo,
                                         report_input& in, int& code) {
  try {
    return build_pipeline(p, bo, in.effective, in.parameters);
  } catch (const config_error& e) {
    if (!e.where().empty()) throw;
    throw config_error(lp.path.string(), e.key(), e.message());
  } catch (const input_error& e) {
    throw input_error(lp.path.string() + ": " + e.what());
  } catch (...) {
    code = record_failure(in);
  }
  return std::nullopt;
}

void log_settings(const profile& p, const effective_settings& e) {
  log_info(p.name + ": device " + e.device + " (" + e.device_name + "), " + std::to_string(e.intra_op_threads) +
           " intra-op threads, " + std::to_string(e.loader_workers) + " loader workers, " +
           std::to_string(e.loader_slots) + " batch buffers");
  for (const auto& n : e.notes) log_warn(n);
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

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

}  // namespace

int run_command(const run_request& req) {
  // Bad input (profile, data, switches refused by --strict) is found before anything is
  // written: exit 2, no report.
  loaded_profile lp = load_profile(req.config, req.sets);
  const profile& p = lp.value;
  build_options bo;
  bo.strict = req.strict;
  bo.with_step = !req.data_only;
  bo.launch = read_launch(process_environment());
  // In a data-parallel job rank 0 writes the report; the others only where the path has {rank}.
  const std::string path_template = req.out.empty() ? report_path_for(p) : req.out;
  const std::string report_path = replace_all(path_template, "{rank}", std::to_string(bo.launch.rank));
  const bool writes_report = bo.launch.rank == 0 || path_template.find("{rank}") != std::string::npos;
  std::optional<double> baseline;
  if (!req.baseline.empty()) baseline = baseline_rate(req.baseline, per_rank_workload_hash(p));
  set_log_quiet(req.quiet || bo.launch.rank != 0);

  report_input in;
  in.prof = p;
  in.profile_path = lp.path.string();
  in.context = host_context(req.command_line);
  install_interrupt_handler();
  int code = exit_code::ok;
  std::optional<pipeline> pipe = build_for_report(lp, p, bo, in, code);
  in.context = full_context(req.command_line, in.effective, p);
  if (pipe) {
    log_settings(p, in.effective);
    runner run(*pipe, p.measure, make_progress(req.quiet || bo.launch.rank != 0));
    try {
      run.run();
    } catch (...) {
      code = record_failure(in);
    }
    in.result = run.result();
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
  if (writes_report) write_file_atomic(report_path, make_report(in).dump(2) + "\n");
  if ((!req.quiet && bo.launch.rank == 0) || code != exit_code::ok) print_summary(in);
  if (code != exit_code::ok) log_error(in.status + ": " + in.error_message);
  if (writes_report) log_info("report written to " + report_path);
  return code;
}

}  // namespace trainbench

namespace trainbench {
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
                  int& code) {
  s.in.prof = p;
  s.in.profile_path = lp.path.string();
  s.in.context = host_context(req.command_line);
  s.pipe = build_for_report(lp, p, build_options{}, s.in, code);
  s.in.context = full_context(req.command_line, s.in.effective, p);
  if (!s.pipe) return;
  log_settings(p, s.in.effective);
  // Batches the loader and the copy ring prefetched while the other side ran would come for
  // free at the start of this side's next window: each round's warmup consumes them.
  measure_config m = p.measure;
  const int prefetched =
      (s.pipe->loader ? s.pipe->loader->slots() : 0) + (s.pipe->transfer ? s.pipe->transfer->lookahead() : 0);
  m.warmup_batches = std::max(m.warmup_batches, prefetched);
  s.run = std::make_unique<runner>(*s.pipe, m, make_progress(req.quiet));
}

// Rounds in ABBA order (loop, ceiling, ceiling, loop, ...) so a drift hits both sides alike.
int run_rounds(std::array<bottleneck_side, 2>& sides, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      bottleneck_side& s = sides[static_cast<std::size_t>(r % 2 == 0 ? k : 1 - k)];
      log_info("round " + std::to_string(r + 1) + "/" + std::to_string(rounds) + ": " + s.in.prof.name);
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

void finish_side(bottleneck_side& s, const std::string& other, int rounds) {
  if (s.run) s.in.result = s.run->result();
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
  const profile& p = lp.value;
  if (p.data.source == data_source::device_synthetic)
    throw config_error(lp.path.string(), "data.source",
                       "is device-synthetic already: there is no input pipeline to measure against the step alone");
  if (req.rounds < 1) throw input_error("bottleneck: --rounds must be at least 1, got " + std::to_string(req.rounds));
  if (req.threshold_pct < 0) throw input_error("bottleneck: --threshold must be >= 0");
  if (req.alpha <= 0 || req.alpha >= 1) throw input_error("bottleneck: --alpha must be in (0, 1)");
  if (read_launch(process_environment()).launcher != "none")
    throw input_error("bottleneck runs in one process; start it without torchrun or srun");
  const fs::path out = req.out.empty() ? fs::path("reports/bottleneck") / p.name : fs::path(req.out);
  fs::remove(out / "bottleneck.json");  // never leave an earlier verdict beside new reports
  set_log_quiet(req.quiet);
  install_interrupt_handler();

  std::array<bottleneck_side, 2> sides;
  sides[0].file = "loop.json";
  sides[1].file = "ceiling.json";
  int code = exit_code::ok;
  prepare_side(sides[0], lp, p, req, code);
  if (sides[0].pipe) prepare_side(sides[1], lp, ceiling_profile(p, sides[0].pipe->batch_size), req, code);
  if (code == exit_code::ok) code = run_rounds(sides, req.rounds);
  share_failure(sides[0], sides[1]);
  share_failure(sides[1], sides[0]);
  finish_side(sides[0], sides[1].pipe ? sides[1].in.prof.name : "", req.rounds);
  finish_side(sides[1], p.name, req.rounds);
  for (const auto& s : sides)
    if (&s == &sides[0] || sides[0].pipe) write_file_atomic(out / s.file, make_report(s.in).dump(2) + "\n");
  if (code != exit_code::ok) {
    for (const auto& s : sides)
      if (s.in.status != "ok") log_error(s.in.prof.name + ": " + s.in.status + ": " + s.in.error_message);
    return code;
  }
  const bottleneck_input b = verdict_input(sides, req.rounds);
  const bottleneck_finding f = judge_bottleneck(b, p, req.threshold_pct, req.alpha);
  write_file_atomic(out / "bottleneck.json", bottleneck_json(f, b, p.name).dump(2) + "\n");
  std::cout << format_bottleneck(f, b, p.name);
  for (const auto& n : sides[0].in.effective.notes) std::cout << "  note        " << n << "\n";
  log_info("reports written to " + out.string() + "/{loop,ceiling,bottleneck}.json");
  return exit_code::ok;
}

}  // namespace trainbench
