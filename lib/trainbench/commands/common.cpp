#include "trainbench/commands/common.hpp"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/data/dataset.hpp"
#include "trainbench/measure/kernel_families.hpp"
#include "trainbench/measure/nvtx.hpp"
#include "trainbench/measure/progress.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/measure/variance.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/torch_compat.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

std::string human_bytes(std::int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

// Model FLOP/s, and how close to the GPU's tensor-core peak the loop runs.
void print_compute(const nlohmann::ordered_json& c) {
  if (c.is_null()) return;
  const double rate = c["model_flops_per_s"].get<double>();
  std::printf("  compute      %.2f %s model (%.2f GFLOPs per sample trained, 3 x forward)",
              rate >= 1e12 ? rate / 1e12 : rate / 1e9, rate >= 1e12 ? "TFLOP/s" : "GFLOP/s",
              c["train_flops_per_sample"].get<double>() / 1e9);
  if (!c["share_of_peak"].is_null())
    std::printf(", %.1f%% of %s%s's %.1f TFLOPS fp16/bf16 peak", 100 * c["share_of_peak"].get<double>(),
                c["devices"].get<int>() > 1 ? (std::to_string(c["devices"].get<int>()) + " x ").c_str() : "",
                c["peak_gpu"].get<std::string>().c_str(), c["peak_flops_per_s"].get<double>() / 1e12);
  std::printf("\n");
}

void print_dist(const dist_result& d) {
  std::printf("  ranks        %d x %s (%s), global batch %lld, %zu gradient buckets\n", d.world, d.backend.c_str(),
              d.launcher.c_str(), static_cast<long long>(d.global_batch_size), d.bucket_bytes.size());
  for (std::size_t r = 0; r < std::max(d.ranks.size(), d.hosts.size()); ++r) {
    std::vector<double> rates;
    if (r < d.ranks.size())
      for (const auto& w : d.ranks[r].windows) rates.push_back(w.samples_per_s);
    std::printf("  rank %-7zu", r);
    if (r < d.hosts.size())
      std::printf(" on %s%s%s", d.hosts[r].host.c_str(), d.hosts[r].address.empty() ? "" : " ",
                  d.hosts[r].address.c_str());
    if (!rates.empty()) std::printf(" median %.1f samples/s", summarize(rates).median);
    if (r < d.ranks.size() && d.ranks[r].allreduce_s_median)
      std::printf(", all-reduce wait %.3f ms", 1000.0 * *d.ranks[r].allreduce_s_median);
    std::printf("\n");
  }
  if (d.scaling_efficiency)
    std::printf("  scaling      %.1f%% of %d x %.1f samples/s (%s)\n", 100.0 * *d.scaling_efficiency, d.world,
                *d.baseline_samples_per_s, d.baseline_report->c_str());
}

// Where the loader's time goes (image folders: per image), and every file it skipped.
void print_loader(const loader_result& l) {
  std::vector<double> busy, per_image[3];
  for (const auto& w : l.windows) {
    busy.push_back(w.fill_s / (std::max(1, l.workers) * w.elapsed_s));
    if (w.images > 0)
      for (int i = 0; i < 3; ++i) per_image[i].push_back(1000.0 * w.phase_s[i] / static_cast<double>(w.images));
  }
  if (!busy.empty()) {
    std::printf("  loader       %d worker%s, busy %.0f%% of the window", l.workers, l.workers == 1 ? "" : "s",
                100.0 * quantile(busy, 0.5));
    if (l.phases && !per_image[0].empty())
      std::printf("; per image: read %.3f, decode %.3f, crop+resize+normalize %.3f ms", quantile(per_image[0], 0.5),
                  quantile(per_image[1], 0.5), quantile(per_image[2], 0.5));
    std::printf("\n");
  }
  if (!l.skipped_files.empty())
    std::printf("  skipped      %zu bad file%s (data.on_bad_file: skip), %lld samples replaced\n",
                l.skipped_files.size(), l.skipped_files.size() == 1 ? "" : "s",
                static_cast<long long>(l.replaced_samples));
}

// data.decode: device: where the images went, and the training thread's time in the decoder's
// submit per image (the whole run, warmup included).
void print_device_decode(const device_decode_result& d) {
  const std::int64_t images = d.images_device + d.host_fallbacks + d.images_workers;
  std::printf("  nvJPEG       %lld images: %lld hardware (%lld as their crop's region), %lld CUDA, %lld by the loader's "
              "workers, %lld on the host; %lld pageable batch%s\n",
              static_cast<long long>(images), static_cast<long long>(d.images_hardware),
              static_cast<long long>(d.images_region), static_cast<long long>(d.images_cuda),
              static_cast<long long>(d.images_workers), static_cast<long long>(d.host_fallbacks),
              static_cast<long long>(d.pageable_batches), d.pageable_batches == 1 ? "" : "es");
  if (d.hardware_refusals > 0)
    std::printf("  engines      refused %lld batched call%s whole; %lld file%s found refused alone, off the "
                "engines since\n",
                static_cast<long long>(d.hardware_refusals), d.hardware_refusals == 1 ? "" : "s",
                static_cast<long long>(d.hardware_refused_files), d.hardware_refused_files == 1 ? "" : "s");
  if (d.arena_waits + d.state_waits > 0)
    std::printf("  engines      the host waited %.1f ms in all: %lld call%s for the crops that last read their arena, "
                "or for the stream after new arenas; %lld for a free decode state\n",
                d.host_wait_s * 1000.0, static_cast<long long>(d.arena_waits), d.arena_waits == 1 ? "" : "s",
                static_cast<long long>(d.state_waits));
  if (images == 0) return;
  const decode_host_phases& h = d.submit_host_s;
  const double ms = 1000.0 / static_cast<double>(images);
  std::printf("  submit       per image on the training thread: route %.3f, hardware %.3f, CUDA %.3f, host %.3f, "
              "crop %.3f ms\n",
              h.route * ms, h.hardware * ms, h.cuda * ms, h.host * ms, h.crop * ms);
}

// The noise by level beside the cv, and what each process cost before its first window.
void print_processes(const run_result& r) {
  std::vector<std::vector<double>> by_process(r.processes.size());
  for (const auto& w : r.windows) {
    if (static_cast<std::size_t>(w.process) >= by_process.size()) by_process.resize(w.process + 1);
    by_process[static_cast<std::size_t>(w.process)].push_back(w.samples_per_s);
  }
  std::vector<double> startup;
  for (const auto& c : r.processes)
    if (c.to_first_window_s) startup.push_back(*c.to_first_window_s);
  const variance_split split = split_variance(by_process);
  std::printf("  processes    %zu", by_process.size());
  if (split.between_sd && split.within_sd)
    std::printf(" fresh: cv %.1f%% within a process, %.1f%% between processes (ICC %.2f)", 100.0 * *split.within_sd,
                100.0 * *split.between_sd, split.icc.value_or(0.0));
  else if (split.processes < 2)
    std::printf(": the noise between processes is unknown (measure.processes or run --processes N)");
  if (!startup.empty()) std::printf("; %.1f s before the first window", quantile(startup, 0.5));
  std::printf("\n");
}

// The stages' medians add up to the batch's only where they run one after another; the line
// below them says by how much they overlapped (the host loading the next batch while the device
// still runs this one's step, a copy stream), or how much of the batch no stage timed.
void print_stage_overlap(const run_result& r) {
  if (r.stages_overlap_s.empty()) return;
  const double o = quantile(r.stages_overlap_s, 0.5);
  if (o >= 0)
    std::printf("  %-12s median %8.3f ms per batch: stages ran at the same time; their sum exceeds the batch by this\n",
                "overlap", 1000.0 * o);
  else
    std::printf("  %-12s median %8.3f ms per batch: in the batch but in no stage; their sum falls short by this\n",
                "untimed", -1000.0 * o);
}

// " (input 0, forward 0, backward 14)", or nothing where the causes were not counted.
std::string skip_causes_text(const run_result& r) {
  if (!r.skipped_by_cause || !r.skipped_steps || *r.skipped_steps == 0) return "";
  std::string out = " (";
  for (std::size_t k = 0; k < r.skipped_by_cause->size(); ++k)
    out += std::string(k ? ", " : "") + skip_cause_names[k] + " " + std::to_string((*r.skipped_by_cause)[k]);
  return out + ")";
}

// ", largest |input| 2.64", or that it was not finite.
std::string input_range_text(const run_result& r) {
  if (!r.skipped_by_cause) return "";
  if (!r.input_abs_max) return ", an input batch held inf/nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, ", largest |input| %.3g", *r.input_abs_max);
  return buf;
}

}  // namespace

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
  c.data_generated = (p.data.source == data_source::cifar10 || p.data.source == data_source::imagefolder) &&
                     fs::exists(data_dir / "GENERATED");
  return c;
}

void print_summary(const report_input& in) {
  const auto& r = in.result;
  std::vector<double> rates;
  for (const auto& w : r.windows) rates.push_back(w.samples_per_s);
  std::printf("%s: %s on %s\n", in.prof.name.c_str(), in.status.c_str(), in.effective.device_name.c_str());
  if (!rates.empty()) {
    const summary s = summarize(rates);
    std::printf("  samples/s    median %.1f  (IQR %.1f - %.1f, %zu window%s, cv %.1f%%)\n", s.median, s.q1, s.q3, s.n,
                s.n == 1 ? "" : "s", 100.0 * s.cv);
    print_processes(r);
  }
  for (int k = 0; k < stage_count; ++k) {
    auto it = r.stages_s.find(stage_name(static_cast<stage_id>(k)));
    if (it != r.stages_s.end())
      std::printf("  %-12s median %8.3f ms per batch\n", it->first.c_str(), 1000.0 * quantile(it->second, 0.5));
  }
  print_stage_overlap(r);
  if (r.memory.device_peak_allocated_bytes)
    std::printf("  device peak  %s allocated, %s reserved\n",
                human_bytes(*r.memory.device_peak_allocated_bytes).c_str(),
                human_bytes(*r.memory.device_peak_reserved_bytes).c_str());
  if (r.memory.host_peak_rss_bytes)
    std::printf("  host peak    %s RSS\n", human_bytes(*r.memory.host_peak_rss_bytes).c_str());
  if (r.loss_first && r.loss_last) std::printf("  loss         %.4f -> %.4f\n", *r.loss_first, *r.loss_last);
  if (r.skipped_steps)
    std::printf("  fp16 scaler  %lld step%s skipped%s, loss scale %g%s\n", static_cast<long long>(*r.skipped_steps),
                *r.skipped_steps == 1 ? "" : "s", skip_causes_text(r).c_str(), r.loss_scale.value_or(0.0),
                input_range_text(r).c_str());
  if (r.loader) print_loader(*r.loader);
  if (r.device_decode) print_device_decode(*r.device_decode);
  if (r.kernel_families) {
    const std::vector<std::string> lines = describe_kernel_families(*r.kernel_families);
    for (std::size_t i = 0; i < lines.size(); ++i) std::printf("  %-12s %s\n", i == 0 ? "kernels" : "", lines[i].c_str());
  }
  print_compute(compute_block(in));
  if (r.dist) print_dist(*r.dist);
  for (const auto& n : in.effective.notes) std::printf("  note: %s\n", n.c_str());
  std::fflush(stdout);
}

void warn_about_result(const report_input& in) {
  const auto& r = in.result;
  std::vector<double> rates;
  for (const auto& w : r.windows) rates.push_back(w.samples_per_s);
  const summary s = summarize(rates);
  const std::string level = noise_level(s);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: samples/s varies by cv %.1f%% over %zu windows", in.prof.name.c_str(),
                100.0 * s.cv, s.n);
  if (level == "noisy")
    log_warn(std::string(buf) +
             " (above 10%): a busy machine or short windows; more windows (measure.repeats, "
             "measure.max_repeats) or longer ones (measure.min_window_s) give a steadier number");
  else if (level == "very_noisy")
    log_warn(std::string(buf) +
             " (above 25%): do not trust this number; rerun on a quiet machine with longer windows "
             "(measure.min_window_s) and more of them");
  if (r.skipped_steps && *r.skipped_steps > 0)
    log_warn(in.prof.name + ": the fp16 loss scaler skipped " + std::to_string(*r.skipped_steps) +
             " optimizer step(s) for inf/nan gradients" + skip_causes_text(r) +
             " (results.amp.skipped_by_cause: input = the batch held inf/nan, forward = the loss was inf/nan, "
             "backward = only the scaled gradients overflowed, as while the scale backs off from its start)");
}

progress_fn make_progress(bool quiet) {
  if (quiet) return {};
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto line = std::make_shared<progress_line>(tty);
  return [line, tty](const char* phase, std::int64_t done, std::int64_t total, double rate) {
    const std::string text = line->update(phase, done, total, rate);
    if (text.empty()) return;
    if (tty) {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    } else {
      log_info(text);
    }
  };
}

int record_failure(report_input& in) {
  try {
    throw;
  } catch (const interrupted_error& e) {
    in.status = "interrupted";
    in.error_kind = "interrupted";
    in.error_message = e.what();
    return exit_code::interrupted;
  } catch (const input_error& e) {
    // Bad data found mid-run (a corrupt JPEG): exit 2 as for any bad input, the report says so.
    in.status = "error";
    in.error_kind = "bad_input";
    in.error_message = e.what();
    return exit_code::bad_input;
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

std::optional<pipeline> build_for_report(const loaded_profile& lp, const profile& p, const build_options& bo,
                                         report_input& in, int& code) {
  try {
    return build_pipeline(p, bo, in.effective, in.parameters);
  } catch (const config_error& e) {
    if (!e.where().empty()) throw;
    throw config_error(origin_of(lp, e.key()), e.key(), e.message());
  } catch (const input_error& e) {
    throw input_error(profile_and_sets(lp) + ": " + e.what());
  } catch (...) {
    code = record_failure(in);
  }
  return std::nullopt;
}

int close_trace(trace_recorder& trace, report_input& in, int code) {
  try {
    trace.close(in.status);
    log_info("trace written to " + trace.path());
  } catch (...) {
    if (code == exit_code::ok) code = record_failure(in);
  }
  return code;
}

void log_settings(const profile& p, const effective_settings& e) {
  log_info(p.name + ": device " + e.device + " (" + e.device_name + "), " + std::to_string(e.intra_op_threads) +
           " intra-op threads, " + std::to_string(e.loader_workers) + " loader workers, " +
           std::to_string(e.loader_slots) + " batch buffers");
  for (const auto& n : e.notes) log_warn(n);
}

}  // namespace trainbench
