#include "trainbench/report/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <thread>

#include "trainbench/config/profile_io.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/measure/variance.hpp"
#include "trainbench/model/resnet_spec.hpp"
#include "trainbench/report/gpu_peak.hpp"

#ifndef TRAINBENCH_VERSION
#define TRAINBENCH_VERSION "0.0.0"
#endif
#ifndef TRAINBENCH_GIT
#define TRAINBENCH_GIT "unknown"
#endif
#ifndef TRAINBENCH_BUILD_TYPE
#define TRAINBENCH_BUILD_TYPE "unknown"
#endif

namespace trainbench {
using json = nlohmann::ordered_json;

std::string tool_version() { return TRAINBENCH_VERSION; }
std::string tool_git() { return TRAINBENCH_GIT; }

namespace {

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json summary_json(const std::vector<double>& values, const char* unit, bool full) {
  if (values.empty()) return nullptr;
  const summary s = summarize(values);
  json j = {{"median", s.median}, {"q1", s.q1}, {"q3", s.q3}, {"mean", s.mean}};
  if (full) {
    j.update({{"min", s.min}, {"max", s.max}, {"stdev", s.stdev}, {"cv", s.cv}, {"n", s.n}, {"unit", unit}});
  }
  return j;
}

json search_json(const std::vector<std::pair<std::int64_t, bool>>& trials) {
  if (trials.empty()) return nullptr;
  json out = json::array();
  for (const auto& [batch, fitted] : trials) out.push_back({{"batch_size", batch}, {"fits", fitted}});
  return out;
}

json effective_json(const effective_settings& e) {
  return {{"device", e.device},
          {"device_name", e.device_name},
          {"intra_op_threads", e.intra_op_threads},
          {"loader_workers", e.loader_workers},
          {"loader_slots", e.loader_slots},
          {"pin_memory", e.pinned_memory},
          {"non_blocking", e.non_blocking},
          {"copy_stream", e.copy_stream},
          {"cuda_graph", e.cuda_graph},
          {"compile", e.compile},
          {"pad_stem", e.pad_stem},
          {"conv_fusion", e.conv_fusion},
          {"cudnn_benchmark", e.cudnn_benchmark},
          {"tf32", e.tf32},
          {"amp", e.amp},
          {"grad_scaler", e.grad_scaler},
          {"channels_last", e.channels_last},
          {"preprocess", e.preprocess},
          {"decode", e.decode},
          {"batch_size", e.batch_size},
          {"batch_size_search", search_json(e.batch_size_search)},
          {"dataset", e.dataset},
          {"transfer", e.transfer},
          {"step", e.step},
          {"clock", e.clock},
          {"notes", e.notes}};
}

json dist_json(const dist_result& d, const run_result& r) {
  // Every rank the job had: a failed run gathered no measurements, but its hosts are known.
  json ranks = json::array();
  const auto text_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  for (std::size_t r = 0; r < std::max(d.ranks.size(), d.hosts.size()); ++r) {
    const rank_result rr = r < d.ranks.size() ? d.ranks[r] : rank_result{static_cast<int>(r), {}, std::nullopt};
    const rank_host h = r < d.hosts.size() ? d.hosts[r] : rank_host{};
    std::vector<double> rates;
    for (const auto& w : rr.windows) rates.push_back(w.samples_per_s);
    ranks.push_back({{"rank", rr.rank},
                     {"host", text_or_null(h.host)},
                     {"address", text_or_null(h.address)},
                     {"samples_per_s", summary_json(rates, "samples/s", true)},
                     {"allreduce_s_median", opt(rr.allreduce_s_median)}});
  }
  json span = nullptr, launched = nullptr;
  if (!r.allreduce_span_s.empty()) span = summary_json(r.allreduce_span_s, "s", false)["median"];
  if (!r.allreduce_launched_in_backward.empty())
    launched = summary_json(r.allreduce_launched_in_backward, "share", false)["median"];
  return {{"backend", d.backend},
          {"launcher", d.launcher},
          {"world_size", d.world},
          {"rank", d.rank},
          {"local_world_size", d.local_world},
          {"global_batch_size", d.global_batch_size},
          {"bucket_cap_mb", d.bucket_cap_mb},
          {"bucket_bytes", d.bucket_bytes},
          {"allreduce_steps", r.allreduce_launched_in_backward.size()},
          {"allreduce_span_s_median", span},
          {"buckets_launched_in_backward", launched},
          {"ranks", ranks},
          {"ranks_in_results", d.ranks_in_results},
          {"baseline_report", opt(d.baseline_report)},
          {"baseline_samples_per_s", opt(d.baseline_samples_per_s)},
          {"scaling_efficiency", opt(d.scaling_efficiency)}};
}

// Null without NVML, as without loss scaling below: an object of nulls would read as measured.
json telemetry_json(const telemetry_result& t) {
  if (t.source == "none") return nullptr;
  return {{"source", t.source},
          {"samples", t.samples},
          {"gpu_util_pct_mean", opt(t.gpu_util_pct_mean)},
          {"mem_util_pct_mean", opt(t.mem_util_pct_mean)},
          {"sm_clock_mhz_mean", opt(t.sm_clock_mhz_mean)},
          {"power_w_mean", opt(t.power_w_mean)},
          {"throttle_reasons_seen", opt(t.throttle_reasons_seen)}};
}

// data.decode: device: totals over the run and per measured window, so a window where the host
// decoded many files is visible beside its throughput.
json device_decode_json(const device_decode_result& d) {
  json windows = json::array();
  for (const auto& w : d.windows)
    windows.push_back({{"images_device", w.images_device},
                       {"images_hardware", w.images_hardware},
                       {"images_cuda", w.images_cuda},
                       {"host_fallbacks", w.host_fallbacks},
                       {"images_workers", w.images_workers},
                       {"hardware_refusals", w.hardware_refusals},
                       {"pageable_batches", w.pageable_batches},
                       {"submit_host_s", w.submit_host_s}});
  const decode_host_phases& h = d.submit_host_s;
  return {{"images_device", d.images_device},       {"images_hardware", d.images_hardware},
          {"images_region", d.images_region},       {"state_waits", d.state_waits},
          {"hardware_refusals", d.hardware_refusals}, {"hardware_refused_files", d.hardware_refused_files},
          {"arena_waits", d.arena_waits},             {"host_wait_s", d.host_wait_s},
          {"images_cuda", d.images_cuda},           {"host_fallbacks", d.host_fallbacks},
          {"images_workers", d.images_workers},
          {"pageable_batches", d.pageable_batches},
          {"submit_host_s", {{"route", h.route}, {"hardware", h.hardware}, {"cuda", h.cuda}, {"host", h.host}, {"crop", h.crop}}},
          {"replaced_samples", d.replaced_samples}, {"bytes_held", d.bytes_held},
          {"peak_bytes_held", d.peak_bytes_held},   {"windows", windows}};
}

// Each family's share of the profiled batches' kernel time, and that time per batch. Kernels on
// several streams may overlap, so the time is device work summed, not elapsed.
json kernel_families_json(const kernel_family_result& k) {
  if (!k.measured) return {{"measured", false}, {"reason", k.reason}};
  double total = 0;
  for (const auto& [family, s] : k.seconds) total += s;
  json shares = json::object(), per_batch = json::object();
  for (const auto& [family, s] : k.seconds) {
    shares[family] = total > 0 ? s / total : 0.0;
    per_batch[family] = k.batches > 0 ? s / k.batches : 0.0;
  }
  json top = json::object();
  for (const auto& [family, tops] : k.top) {
    json list = json::array();
    for (const kernel_top& t : tops)
      list.push_back({{"name", t.name},
                      {"s_per_batch", k.batches > 0 ? t.seconds / k.batches : 0.0},
                      {"kernels_per_batch", k.batches > 0 ? static_cast<double>(t.kernels) / k.batches : 0.0}});
    top[family] = list;
  }
  return {{"measured", true},
          {"source", k.source},
          {"batches", k.batches},
          {"kernels", k.kernels},
          {"dropped_records", k.dropped},
          {"kernel_s_per_batch", k.batches > 0 ? total / k.batches : 0.0},
          {"shares", shares},
          {"s_per_batch", per_batch},
          {"top", top}};
}

json skipped_by_cause_json(const std::optional<std::array<std::int64_t, 3>>& c) {
  if (!c) return nullptr;
  json out = json::object();
  for (std::size_t k = 0; k < c->size(); ++k) out[skip_cause_names[k]] = (*c)[k];
  return out;
}

json amp_json(const run_result& r) {
  if (!r.skipped_steps && !r.loss_scale) return nullptr;
  return {{"skipped_steps", opt(r.skipped_steps)},
          {"skipped_by_cause", skipped_by_cause_json(r.skipped_by_cause)},
          {"input_abs_max", opt(r.input_abs_max)},
          {"loss_scale", opt(r.loss_scale)}};
}

// Per window: each phase's seconds per image, the workers' busy share, images decoded per second.
json loader_json(const loader_result& l) {
  std::vector<double> busy, rate;
  std::vector<double> per_image[3];
  for (const auto& w : l.windows) {
    busy.push_back(w.fill_s / (std::max(1, l.workers) * w.elapsed_s));
    rate.push_back(static_cast<double>(w.images) / w.elapsed_s);
    if (w.images > 0)
      for (int i = 0; i < 3; ++i) per_image[i].push_back(w.phase_s[i] / static_cast<double>(w.images));
  }
  json phases = nullptr;
  if (l.phases) {
    const char* names[3] = {"read", "decode", "crop_resize"};
    phases = json::object();
    for (int i = 0; i < 3; ++i) phases[names[i]] = summary_json(per_image[i], "s", false);
  }
  json skipped = json::array();
  for (const auto& f : l.skipped_files)
    skipped.push_back({{"path", f.path}, {"reason", f.reason}, {"processes", f.processes}});
  return {{"workers", l.workers},
          {"busy_share", summary_json(busy, "share", false)},
          {"images_per_s", summary_json(rate, "images/s", false)},
          {"per_image_s", phases},
          {"skipped_files", skipped},
          {"replaced_samples", l.replaced_samples}};
}

// The windows by the fresh process that measured them: noise per level (within a process,
// between processes) and what a process costs before its first window.
json processes_json(const run_result& r) {
  std::size_t count = r.processes.size();
  for (const auto& w : r.windows) count = std::max(count, static_cast<std::size_t>(w.process) + 1);
  if (count == 0) return nullptr;
  std::vector<std::vector<double>> by_process(count);
  std::vector<double> elapsed;
  for (const auto& w : r.windows) {
    by_process[static_cast<std::size_t>(w.process)].push_back(w.samples_per_s);
    elapsed.push_back(w.elapsed_s);
  }
  std::vector<double> first_window, build, warmup, medians;
  const auto keep = [](std::vector<double>& into, const std::optional<double>& v) {
    if (v) into.push_back(*v);
  };
  json per_process = json::array();
  for (std::size_t i = 0; i < count; ++i) {
    const process_cost c = i < r.processes.size() ? r.processes[i] : process_cost{};
    const auto& windows = by_process[i];
    if (!windows.empty()) medians.push_back(quantile(windows, 0.5));
    per_process.push_back({{"windows", windows.size()},
                           {"samples_per_s_median", windows.empty() ? json(nullptr) : json(medians.back())},
                           {"before_first_window_s", opt(c.to_first_window_s)},
                           {"build_s", opt(c.build_s)},
                           {"warmup_s", opt(c.warmup_s)},
                           {"measured_from_unix_s", opt(c.measured_from_unix_s)},
                           {"measured_to_unix_s", opt(c.measured_to_unix_s)}});
    keep(first_window, c.to_first_window_s);
    keep(build, c.build_s);
    keep(warmup, c.warmup_s);
  }
  const auto median_or_null = [](const std::vector<double>& v) {
    return v.empty() ? json(nullptr) : json(quantile(v, 0.5));
  };
  const variance_split split = split_variance(by_process);
  json out = {{"count", count},
              {"measured", medians.size()},
              {"median_of_medians", median_or_null(medians)},
              {"within_process_cv", opt(split.within_sd)},
              {"between_process_cv", opt(split.between_sd)},
              {"icc", opt(split.icc)},
              {"cost_s",
               {{"before_first_window", median_or_null(first_window)},
                {"build", median_or_null(build)},
                {"warmup", median_or_null(warmup)},
                {"window", median_or_null(elapsed)}}},
              {"per_process", per_process}};
  if (medians.size() < 2)
    out["note"] = "one process measured: the noise between processes is unknown (measure.processes, run --processes N)";
  else if (!split.within_sd)
    out["note"] = "one window per process: the noise within a process and between processes cannot be told apart";
  return out;
}

json results_json(const run_result& r) {
  std::vector<double> rates;
  json repeats = json::array();
  for (const auto& w : r.windows) {
    rates.push_back(w.samples_per_s);
    repeats.push_back({{"samples", w.samples},
                       {"elapsed_s", w.elapsed_s},
                       {"samples_per_s", w.samples_per_s},
                       {"process", w.process}});
  }
  json stages = json::object();
  for (const auto& [name, values] : r.stages_s) stages[name] = summary_json(values, "s", false);
  json overlap = nullptr;
  if (!r.overlap_shares.empty()) overlap = summary_json(r.overlap_shares, "share", false)["median"];
  return {
      {"samples_per_s", summary_json(rates, "samples/s", true)},
      {"repeats", repeats},
      {"warmup_batches_done", r.warmup_batches_done},
      {"window_batches", r.window_batches},
      {"stopped_by", r.stopped_by},
      {"noise", rates.empty() ? json(nullptr) : json(noise_level(summarize(rates)))},
      {"processes", processes_json(r)},
      {"stages_s", stages},
      {"stages_overlap_s", summary_json(r.stages_overlap_s, "s", false)},
      {"h2d_overlap_share", overlap},
      {"memory",
       {{"device_peak_allocated_bytes", opt(r.memory.device_peak_allocated_bytes)},
        {"device_peak_reserved_bytes", opt(r.memory.device_peak_reserved_bytes)},
        {"host_peak_rss_bytes", opt(r.memory.host_peak_rss_bytes)}}},
      {"telemetry", telemetry_json(r.telemetry)},
      {"loss", {{"first", opt(r.loss_first)}, {"last", opt(r.loss_last)}}},
      {"amp", amp_json(r)},
      {"kernel_families", r.kernel_families ? kernel_families_json(*r.kernel_families) : json(nullptr)},
      {"distributed", r.dist ? dist_json(*r.dist, r) : json(nullptr)},
      {"loader", r.loader ? loader_json(*r.loader) : json(nullptr)},
      {"device_decode", r.device_decode ? device_decode_json(*r.device_decode) : json(nullptr)},
  };
}

// One forward's FLOPs per sample at the run's input size, from the architecture's layer shapes;
// none without a model (bench-data).
std::optional<double> forward_flops_of(const report_input& in) {
  const resnet_spec* spec = find_resnet_spec(in.prof.model.arch);
  if (in.parameters == 0 || !spec) return std::nullopt;
  const std::int64_t side = in.prof.data.image_size;
  return forward_flops(*spec, in.prof.model.num_classes, side, side);
}

json model_json(const report_input& in, const std::optional<double>& forward) {
  const int side = in.prof.data.image_size;
  return {{"arch", in.prof.model.arch},
          {"parameters", in.parameters},
          {"input_shape", {3, side, side}},
          {"forward_flops_per_sample", opt(forward)}};
}

// Achieved model FLOP/s: training counted as 3 x the forward (the backward computes gradients
// for inputs and for weights, each about a forward), at the median samples/s; against the GPU's
// dense fp16/bf16 tensor peak where the table knows the part.
json compute_json(const report_input& in, const std::optional<double>& forward) {
  if (!forward || in.result.windows.empty()) return nullptr;
  std::vector<double> rates;
  for (const auto& w : in.result.windows) rates.push_back(w.samples_per_s);
  const double train = 3 * *forward;
  const double achieved = train * summarize(rates).median;
  // The devices whose samples the windows hold: one when the ranks could not be gathered.
  const int devices = in.result.dist ? in.result.dist->ranks_in_results : 1;
  std::optional<gpu_peak> peak;
  if (in.effective.device.rfind("cuda", 0) == 0) peak = dense_tensor_peak(in.effective.device_name);
  return {{"train_flops_per_sample", train},
          {"model_flops_per_s", achieved},
          {"devices", devices},
          {"peak_gpu", peak ? json(peak->gpu) : json(nullptr)},
          {"peak_flops_per_s", peak ? json(peak->flops_per_s) : json(nullptr)},
          {"peak_source", peak ? json(peak->source) : json(nullptr)},
          {"share_of_peak", peak ? json(achieved / (peak->flops_per_s * devices)) : json(nullptr)}};
}

}  // namespace

nlohmann::ordered_json compute_block(const report_input& in) { return compute_json(in, forward_flops_of(in)); }

nlohmann::ordered_json make_report(const report_input& in) {
  const auto& c = in.context;
  json gpu = nullptr;
  if (c.gpu) {
    gpu = {
        {"name", c.gpu->name}, {"uuid", c.gpu->uuid}, {"driver", c.gpu->driver}, {"memory_bytes", c.gpu->memory_bytes}};
  }
  json error = nullptr;
  if (in.status != "ok") error = {{"kind", in.error_kind}, {"message", in.error_message}};
  const std::optional<double> forward = forward_flops_of(in);
  json results = results_json(in.result);
  results["compute"] = compute_json(in, forward);
  return {
      {"schema_version", report_schema_version},
      {"tool", {{"name", in.tool_name}, {"version", tool_version()}, {"git", tool_git()}}},
      {"measurement", in.measurement},
      {"status", in.status},
      {"error", error},
      {"context",
       {{"date", c.date},
        {"host", c.host},
        {"cpu", {{"model", c.cpu_model}, {"cores", c.cpu_cores}}},
        {"gpu", gpu},
        {"libtorch", c.libtorch},
        {"cuda", c.cuda},
        {"cudnn", c.cudnn},
        {"build_type", c.build_type},
        {"nvtx", c.nvtx},
        {"data_generated", c.data_generated},
        {"command_line", c.command_line}}},
      {"profile",
       {{"name", in.prof.name},
        {"description", in.prof.description},
        {"path", in.profile_path},
        {"hash", profile_hash(in.prof)},
        {"workload_hash", workload_hash(in.prof)},
        {"per_rank_workload_hash", per_rank_workload_hash(in.prof)},
        {"resolved", to_yaml(in.prof)}}},
      {"effective", effective_json(in.effective)},
      {"model", model_json(in, forward)},
      {"measure",
       {{"warmup_batches", in.prof.measure.warmup_batches},
        {"measured_batches", in.prof.measure.measured_batches},
        {"repeats", in.prof.measure.repeats},
        {"processes", in.prof.measure.processes},
        {"max_repeats", in.prof.measure.max_repeats},
        {"target_cv", in.prof.measure.target_cv},
        {"min_window_s", in.prof.measure.min_window_s}}},
      {"results", results},
  };
}

context_info host_context(const std::string& command_line) {
  context_info c;
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  c.date = date;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  c.host = host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      c.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  c.cpu_cores = static_cast<int>(std::thread::hardware_concurrency());
  c.build_type = TRAINBENCH_BUILD_TYPE;
  c.command_line = command_line;
  return c;
}

}  // namespace trainbench
