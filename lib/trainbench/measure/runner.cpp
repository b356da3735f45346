#include "trainbench/measure/runner.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include "trainbench/measure/nvtx.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/process_age.hpp"

namespace trainbench {

runner::runner(pipeline& p, const measure_config& m, progress_fn progress)
    : p_(p), m_(m), progress_(std::move(progress)), window_batches_(m.measured_batches) {
  result_.window_batches = window_batches_;
  batch_ranges_ = m.nvtx != nvtx_level::off;
  stage_ranges_ = m.nvtx == nvtx_level::stage;
}

void runner::run() {
  const auto started = std::chrono::steady_clock::now();
  if (p_.step) {
    nvtx_range range(batch_ranges_, "prepare");  // a CUDA graph's capture: never in a window
    p_.step->prepare();
  }
  warmup();
  if (m_.min_window_s > 0 && !calibrated_) calibrate();
  if (result_.processes.empty()) {  // this process's cost before its first window (build_s: the caller's)
    process_cost cost;
    cost.warmup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (const double age = seconds_since_process_start(); age >= 0) cost.to_first_window_s = age;
    result_.processes.push_back(cost);
  }
  p_.probe->reset_peaks();
  p_.probe->start_sampling();
  const std::size_t first = result_.windows.size();
  const auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  if (!result_.processes.back().measured_from_unix_s) result_.processes.back().measured_from_unix_s = unix_now();
  for (int r = 0; r < m_.repeats || more_windows(first, r); ++r) measure_window(r);
  result_.processes.back().measured_to_unix_s = unix_now();
  p_.probe->stop_sampling();
  read_loss(result_.loss_last);
  if (p_.step) {
    if (const grad_scaler* s = p_.step->scaler()) read_scaler(*s);
  }
  p_.probe->fill(result_.memory, result_.telemetry);
  record_kernel_families();
}

// measure.kernel_families: one more window of batches, after everything measured was read, with
// the profiler recording every kernel; its batches count nowhere else.
void runner::record_kernel_families() {
  if (!p_.step || !m_.kernel_families) return;
  if (!p_.kernels) {
    kernel_family_result k;
    k.reason = p_.kernels_not_measured;
    result_.kernel_families = k;
    return;
  }
  // A profiler that cannot start or read its records costs the figure, not the run measured before.
  const auto unavailable = [&](const std::exception& e) {
    kernel_family_result k;
    k.reason = std::string("the profiler failed: ") + e.what();
    result_.kernel_families = k;
  };
  nvtx_range range(batch_ranges_, "kernel families");
  try {
    p_.kernels->start();
  } catch (const std::exception& e) {
    unavailable(e);
    return;
  }
  for (int i = 0; i < window_batches_; ++i) run_batch(-1);
  try {
    result_.kernel_families = p_.kernels->stop(window_batches_);
    if (result_.kernel_families->measured && !p_.kernels_caveat.empty())
      result_.kernel_families->source += "; " + p_.kernels_caveat;
  } catch (const std::exception& e) {
    unavailable(e);
  }
}

// The loader's workers fill the ring while the run is set up (the model, cuDNN's first choices, a
// graph's capture) and while the first batches take long: those batches cost the step nothing to
// take, so windows served from them would show an input-bound loop as compute-bound. Warmup takes
// as many batches as the ring and the copy stage hold beyond the profile's, so that every window
// meets the loader in its steady state, with a model or without (bench-data).
int runner::warmup_count() const {
  if (!p_.loader) return m_.warmup_batches;
  const int ring = p_.loader->workers() > 0 ? p_.loader->slots() : 0;  // no workers: loaded on demand
  return m_.warmup_batches + ring + (p_.transfer ? p_.transfer->lookahead() : 0);
}

void runner::warmup() {
  nvtx_range range(batch_ranges_, "warmup");
  const int n = warmup_count();
  for (int i = 0; i < n; ++i) {
    run_batch(-1);
    if (i == 0 && !result_.loss_first) read_loss(result_.loss_first);  // outside any measured window
    result_.warmup_batches_done = i + 1;
    if (progress_) progress_("warmup", i + 1, n, 0.0);
  }
}

double window_batches_wanted(int batches, double elapsed_s, double min_window_s) {
  if (elapsed_s >= min_window_s) return batches;
  const double grown = elapsed_s > 0 ? std::ceil(1.2 * batches * min_window_s / elapsed_s) : 10.0 * batches;
  return std::min({grown, 10.0 * batches, 1e8});
}

// measure.min_window_s: before measuring, unrecorded windows (timed like measured ones) grow the
// batch count until one lasts that long, as google/benchmark grows its iterations. Ranks take
// the largest count any of them needs, so every rank runs the same batches (and collectives).
void runner::calibrate() {
  nvtx_range range(batch_ranges_, "calibration");
  int n = window_batches_;
  for (int attempt = 0;; ++attempt) {
    if (p_.group) p_.group->barrier();
    p_.clock->start_window(n);
    for (int row = 0; row < n; ++row) {
      run_batch(row);
      if (progress_) progress_("calibrate", row + 1, n, 0.0);
    }
    window_times ignored;
    const double elapsed = p_.clock->finish_window(ignored);
    const double wanted = window_batches_wanted(n, elapsed, m_.min_window_s);
    double agreed = wanted;
    if (p_.group)
      for (const auto& rank : p_.group->all_gather({wanted})) agreed = std::max(agreed, rank.at(0));
    if (agreed <= n || attempt == max_calibrations) break;
    n = static_cast<int>(agreed);
  }
  window_batches_ = n;
  result_.window_batches = n;
  calibrated_ = true;
}

void runner::measure_window(int repeat) {
  const int n = window_batches_;
  std::int64_t samples = 0;
  if (p_.group) p_.group->barrier();  // every rank's window starts together
  const load_totals loaded_before = p_.loader ? p_.loader->load_counts() : load_totals{};
  const device_decode_counts* decoded = p_.transfer ? p_.transfer->decode_counts() : nullptr;
  const device_decode_counts decoded_before = decoded ? *decoded : device_decode_counts{};
  if (p_.trace) p_.trace->window_begin(next_batch_, n);
  window_times times;
  double elapsed = 0;
  int row = 0;
  std::exception_ptr failure;
  {
    // The range holds what the window's time counts, nothing before or after it; numbered as
    // the report's windows (results.repeats), also when run() is called again.
    nvtx_range range(batch_ranges_, "measured window", static_cast<long long>(result_.windows.size()));
    p_.clock->start_window(n);
    try {
      for (; row < n; ++row) {
        samples += run_batch(row);
        if (progress_)
          progress_("measure", static_cast<std::int64_t>(repeat) * n + row + 1,
                    static_cast<std::int64_t>(std::max(m_.repeats, m_.max_repeats)) * n,
                    result_.windows.empty() ? 0.0 : result_.windows.back().samples_per_s);
      }
    } catch (...) {
      failure = std::current_exception();
    }
    if (!failure) elapsed = p_.clock->finish_window(times);
  }
  if (failure) {
    trace_failed_window(row);
    std::rethrow_exception(failure);
  }
  if (p_.trace) p_.trace->window_end(times);
  result_.windows.push_back({samples, elapsed, static_cast<double>(samples) / elapsed});
  if (p_.loader) record_loader(p_.loader->load_counts() - loaded_before, elapsed);
  if (decoded) record_device_decode(decoded_before, *decoded);
  const int whole = static_cast<int>(stage_id::batch);
  for (const auto& row : times.per_batch) {
    double summed = 0;
    for (int s = 0; s < stage_count; ++s) {
      if (row[s] < 0) continue;
      result_.stages_s[stage_name(static_cast<stage_id>(s))].push_back(row[s]);
      if (s != whole) summed += row[s];
    }
    if (row[whole] >= 0) result_.stages_overlap_s.push_back(summed - row[whole]);
  }
  if (times.overlap_share) result_.overlap_shares.push_back(*times.overlap_share);
  if (!result_.loss_first) read_loss(result_.loss_first);  // no warmup: the first window's last loss
}

// A window that failed (or was interrupted) after `batches_done` batches: the trace keeps what it
// recorded up to the failure, when a timeline helps most. The failure in flight is what the
// run reports, so a second one here (a device that failed cannot be read) must not replace it:
// the trace then keeps the loader's side alone.
void runner::trace_failed_window(int batches_done) {
  if (!p_.trace) return;
  window_times times;
  try {
    p_.clock->finish_window(times);
  } catch (...) {
    times = window_times{};
  }
  try {
    p_.trace->window_failed(times, batches_done);
  } catch (...) {
    // close() reports a trace that cannot be written.
  }
}

// Noise-based stopping (measure.max_repeats): one more window while this run's windows are
// noisier than measure.target_cv. Ranks agree, so every rank stops after the same window.
bool runner::more_windows(std::size_t first, int done) {
  if (m_.max_repeats == 0) return false;
  std::vector<double> rates;
  for (std::size_t i = first; i < result_.windows.size(); ++i) rates.push_back(result_.windows[i].samples_per_s);
  bool noisy = summarize(rates).cv > m_.target_cv;
  if (p_.group)
    for (const auto& rank : p_.group->all_gather({noisy ? 1.0 : 0.0})) noisy = noisy || rank.at(0) > 0;
  result_.stopped_by = noisy ? "max_repeats" : "target_cv";
  return noisy && done < m_.max_repeats;
}

// `batch` numbers the stage's NVTX range: the batch it serves (data_wait, h2d: the one fetched).
template <class F>
void runner::timed(stage_id s, int row, std::int64_t batch, F&& work) {
  nvtx_range range(stage_ranges_, stage_name(s), batch);
  if (row >= 0) p_.clock->begin(s, row);
  work();
  if (row >= 0) p_.clock->end(s, row);
}

// Pull the next host batch from the loader and start its copy.
void runner::fetch(int row) {
  const host_batch* batch = nullptr;
  {
    nvtx_range range(batch_ranges_, "__next__", submitted_);
    timed(stage_id::data_wait, row, submitted_, [&] { batch = &p_.loader->next(); });
  }
  nvtx_range range(batch_ranges_, "copy data", submitted_);
  timed(stage_id::h2d, row, submitted_, [&] { p_.transfer->submit(*batch, *p_.loader); });
  ++submitted_;
}

std::int64_t runner::run_batch(int row) {
  throw_if_interrupted();
  const std::int64_t index = next_batch_++;
  nvtx_range range(batch_ranges_, "batch", index);
  if (row >= 0) p_.clock->begin(stage_id::batch, row);
  device_batch batch = p_.fixed;
  if (p_.transfer) {
    // Keep lookahead() batches in flight: submit batch index + lookahead, then take batch index.
    const std::int64_t ahead = index + p_.transfer->lookahead();
    while (submitted_ <= ahead) fetch(submitted_ == ahead ? row : -1);
    batch = p_.transfer->take();
  }
  if (p_.preprocess) timed(stage_id::preprocess, row, index, [&] { batch.images = (*p_.preprocess)(batch.images); });
  if (p_.step && p_.step->fused()) {
    // One replayed graph: forward, loss, backward and optimizer, timed and named as one `step`.
    nvtx_range whole(batch_ranges_, "step", index);
    timed(stage_id::step, row, index, [&] { p_.step->forward(batch); });
  } else if (p_.step) {
    {
      nvtx_range fwd(batch_ranges_, "forward", index);
      timed(stage_id::forward, row, index, [&] { p_.step->forward(batch); });
    }
    nvtx_range bwd(batch_ranges_, "backward", index);
    if (p_.sync) p_.sync->begin_backward();
    timed(stage_id::backward, row, index, [&] { p_.step->backward(); });
    if (p_.sync) {
      bool synced = false;
      timed(stage_id::allreduce, row, index, [&] { synced = p_.sync->finish(); });
      if (synced && row >= 0) record_sync();
    }
    timed(stage_id::optimizer, row, index, [&] { p_.step->optimizer_step(); });
  }
  if (p_.transfer) p_.transfer->step_done();
  if (row >= 0) p_.clock->end(stage_id::batch, row);
  return batch.count;
}

// The loader's counters over the window, and what it skipped so far (read outside the window).
void runner::record_loader(const load_totals& d, double elapsed) {
  if (!result_.loader) {
    result_.loader.emplace();
    result_.loader->workers = p_.loader->workers();
  }
  loader_window w;
  w.elapsed_s = elapsed;
  w.images = d.images;
  w.fill_s = d.fill_s;
  for (int i = 0; i < load_phase_count; ++i) w.phase_s[i] = d.phase_s[i];
  result_.loader->phases = result_.loader->phases || d.phase_s[static_cast<int>(load_phase::decode)] > 0;
  result_.loader->windows.push_back(w);
  result_.loader->skipped_files.clear();
  for (const auto& f : p_.loader->skipped_files()) result_.loader->skipped_files.push_back({f.path, f.reason, 1});
  result_.loader->replaced_samples = p_.loader->replaced_samples();
}

// data.decode: device: the images decoded in the window's submits, and the run's totals so far.
void runner::record_device_decode(const device_decode_counts& before, const device_decode_counts& now) {
  if (!result_.device_decode) result_.device_decode.emplace();
  device_decode_result& d = *result_.device_decode;
  d.windows.push_back({now.images_device - before.images_device, now.host_fallbacks - before.host_fallbacks,
                       now.images_hardware - before.images_hardware, now.images_cuda - before.images_cuda,
                       now.pageable_batches - before.pageable_batches,
                       static_cast<double>(now.submit_ns() - before.submit_ns()) * 1e-9,
                       now.images_workers - before.images_workers, now.hardware_refusals - before.hardware_refusals});
  d.images_device = now.images_device;
  d.images_hardware = now.images_hardware;
  d.images_region = now.images_region;
  d.state_waits = now.state_waits;
  d.hardware_refusals = now.hardware_refusals;
  d.hardware_refused_files = now.hardware_refused_files;
  d.arena_waits = now.arena_waits;
  d.host_wait_s = static_cast<double>(now.wait_ns) * 1e-9;
  d.images_cuda = now.images_cuda;
  d.host_fallbacks = now.host_fallbacks;
  d.images_workers = now.images_workers;
  d.pageable_batches = now.pageable_batches;
  d.submit_host_s = {static_cast<double>(now.route_ns) * 1e-9, static_cast<double>(now.hardware_ns) * 1e-9,
                     static_cast<double>(now.cuda_ns) * 1e-9, static_cast<double>(now.fallback_ns) * 1e-9,
                     static_cast<double>(now.crop_ns) * 1e-9};
  d.replaced_samples = now.replaced_samples;
  d.bytes_held = now.bytes_held;
  d.peak_bytes_held = now.peak_bytes_held;
}

void runner::record_sync() {
  const sync_timing& t = p_.sync->last_timing();
  result_.allreduce_launched_in_backward.push_back(t.launched_in_backward);
  // Host times mean something only where wait() returns once the data is there (Gloo).
  if (p_.group->host_blocking()) result_.allreduce_span_s.push_back(t.launch_to_done_s);
}

// After the windows: one copy of the scaler's counts to the host. In a data-parallel run each
// rank sees only its own batches while the skip is the job's (the gradients are all-reduced), so
// the causes and the input's range, one rank's view, are left out.
void runner::read_scaler(const grad_scaler& s) {
  const at::Tensor all = at::cat({s.skipped_steps().reshape({1}), s.scale_tensor().reshape({1}), s.skip_causes(),
                                  s.input_abs_max().reshape({1})})
                             .to(at::kCPU, at::kDouble);
  const double* v = all.data_ptr<double>();
  result_.skipped_steps = std::llround(v[0]);
  result_.loss_scale = v[1];
  if (p_.group && p_.group->world() > 1) return;
  result_.skipped_by_cause = std::array<std::int64_t, 3>{std::llround(v[2]), std::llround(v[3]), std::llround(v[4])};
  result_.input_abs_max = std::isfinite(v[5]) ? std::optional<double>(v[5]) : std::nullopt;
}

void runner::read_loss(std::optional<double>& into) {
  if (!p_.step) return;
  at::Tensor loss = p_.step->last_loss();
  if (loss.defined()) into = loss.item<double>();
}

}  // namespace trainbench
