#include "trainbench/report/pooling.hpp"

#include <algorithm>

#include "trainbench/measure/kernel_families.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

namespace trainbench {
using json = nlohmann::json;
namespace {

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

template <class T>
std::optional<T> opt_from(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<T>();
}

json windows_json(const std::vector<window_result>& windows) {
  json out = json::array();
  for (const auto& w : windows) out.push_back({w.samples, w.elapsed_s, w.samples_per_s, w.process});
  return out;
}

std::vector<window_result> windows_from(const json& j) {
  std::vector<window_result> out;
  for (const auto& w : j)
    out.push_back({w.at(0).get<std::int64_t>(), w.at(1).get<double>(), w.at(2).get<double>(), w.at(3).get<int>()});
  return out;
}

// Windows of a round pooled as process `process` (each round is one fresh process).
std::vector<window_result> as_process(std::vector<window_result> windows, int process) {
  for (auto& w : windows) w.process = process;
  return windows;
}

json dist_json(const dist_result& d) {
  json ranks = json::array();
  for (const auto& r : d.ranks)
    ranks.push_back({{"rank", r.rank}, {"windows", windows_json(r.windows)}, {"allreduce", opt(r.allreduce_s_median)}});
  json hosts = json::array();
  for (const auto& h : d.hosts) hosts.push_back({h.host, h.address});
  return {{"backend", d.backend},
          {"hosts", hosts},
          {"launcher", d.launcher},
          {"world", d.world},
          {"rank", d.rank},
          {"local_world", d.local_world},
          {"global_batch_size", d.global_batch_size},
          {"bucket_cap_mb", d.bucket_cap_mb},
          {"bucket_bytes", d.bucket_bytes},
          {"ranks", ranks},
          {"ranks_in_results", d.ranks_in_results},
          {"baseline_report", opt(d.baseline_report)},
          {"baseline_samples_per_s", opt(d.baseline_samples_per_s)},
          {"scaling_efficiency", opt(d.scaling_efficiency)}};
}

dist_result dist_from(const json& j) {
  dist_result d;
  d.backend = j.at("backend").get<std::string>();
  d.launcher = j.at("launcher").get<std::string>();
  d.world = j.at("world").get<int>();
  d.rank = j.at("rank").get<int>();
  d.local_world = j.at("local_world").get<int>();
  d.global_batch_size = j.at("global_batch_size").get<std::int64_t>();
  d.bucket_cap_mb = j.at("bucket_cap_mb").get<double>();
  d.bucket_bytes = j.at("bucket_bytes").get<std::vector<std::int64_t>>();
  for (const auto& r : j.at("ranks"))
    d.ranks.push_back({r.at("rank").get<int>(), windows_from(r.at("windows")), opt_from<double>(r, "allreduce")});
  for (const auto& h : j.at("hosts")) d.hosts.push_back({h.at(0).get<std::string>(), h.at(1).get<std::string>()});
  d.ranks_in_results = j.value("ranks_in_results", d.world);
  d.baseline_report = opt_from<std::string>(j, "baseline_report");
  d.baseline_samples_per_s = opt_from<double>(j, "baseline_samples_per_s");
  d.scaling_efficiency = opt_from<double>(j, "scaling_efficiency");
  return d;
}

template <class T>
void append(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

template <class T>
std::optional<T> larger(const std::optional<T>& a, const std::optional<T>& b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

// Means over all samples of all rounds: each round's mean weighted by its sample count.
void pool_telemetry(telemetry_result& into, const telemetry_result& t) {
  if (t.source == "none" || t.samples == 0) return;
  const double a = static_cast<double>(into.samples), b = static_cast<double>(t.samples);
  auto mean = [&](std::optional<double>& x, const std::optional<double>& y) {
    if (!y) return;
    x = x ? (*x * a + *y * b) / (a + b) : *y;
  };
  mean(into.gpu_util_pct_mean, t.gpu_util_pct_mean);
  mean(into.mem_util_pct_mean, t.mem_util_pct_mean);
  mean(into.sm_clock_mhz_mean, t.sm_clock_mhz_mean);
  mean(into.power_w_mean, t.power_w_mean);
  if (t.throttle_reasons_seen)
    into.throttle_reasons_seen = into.throttle_reasons_seen.value_or(0) | *t.throttle_reasons_seen;
  into.source = t.source;
  into.samples += t.samples;
}

json loader_state_json(const loader_result& l) {
  json windows = json::array();
  for (const auto& w : l.windows)
    windows.push_back({w.elapsed_s, w.images, w.fill_s, w.phase_s[0], w.phase_s[1], w.phase_s[2]});
  json skipped = json::array();
  for (const auto& f : l.skipped_files) skipped.push_back({f.path, f.reason, f.processes});
  return {{"workers", l.workers},
          {"phases", l.phases},
          {"windows", windows},
          {"skipped_files", skipped},
          {"replaced_samples", l.replaced_samples}};
}

loader_result loader_from(const json& j) {
  loader_result l;
  l.workers = j.at("workers").get<int>();
  l.phases = j.at("phases").get<bool>();
  for (const auto& w : j.at("windows")) {
    loader_window x;
    x.elapsed_s = w.at(0).get<double>();
    x.images = w.at(1).get<std::int64_t>();
    x.fill_s = w.at(2).get<double>();
    for (int k = 0; k < 3; ++k) x.phase_s[k] = w.at(3 + k).get<double>();
    l.windows.push_back(x);
  }
  for (const auto& f : j.at("skipped_files"))
    l.skipped_files.push_back({f.at(0).get<std::string>(), f.at(1).get<std::string>(), f.at(2).get<int>()});
  l.replaced_samples = j.at("replaced_samples").get<std::int64_t>();
  return l;
}

// Every round's loader windows; a file skipped in several rounds listed once, with how many
// skipped it. The workers and phases are the profile's, the same each round.
void pool_loader(std::optional<loader_result>& into, const loader_result& l) {
  if (!into) {
    into = l;
    return;
  }
  append(into->windows, l.windows);
  for (const auto& f : l.skipped_files) {
    auto same = std::find_if(into->skipped_files.begin(), into->skipped_files.end(),
                             [&](const skipped_file_record& g) { return g.path == f.path; });
    if (same == into->skipped_files.end())
      into->skipped_files.push_back(f);
    else
      same->processes += f.processes;
  }
  into->replaced_samples += l.replaced_samples;
}

json device_decode_state_json(const device_decode_result& d) {
  json windows = json::array();
  for (const auto& w : d.windows)
    windows.push_back(
        {w.images_device, w.host_fallbacks, w.images_hardware, w.images_cuda, w.pageable_batches, w.submit_host_s,
         w.images_workers, w.hardware_refusals});
  const decode_host_phases& h = d.submit_host_s;
  return {{"windows", windows},
          {"images_device", d.images_device},
          {"images_hardware", d.images_hardware},
          {"images_region", d.images_region},
          {"state_waits", d.state_waits},
          {"hardware_refusals", d.hardware_refusals},
          {"hardware_refused_files", d.hardware_refused_files},
          {"arena_waits", d.arena_waits},
          {"host_wait_s", d.host_wait_s},
          {"images_cuda", d.images_cuda},
          {"host_fallbacks", d.host_fallbacks},
          {"images_workers", d.images_workers},
          {"pageable_batches", d.pageable_batches},
          {"submit_host_s", {h.route, h.hardware, h.cuda, h.host, h.crop}},
          {"replaced_samples", d.replaced_samples},
          {"bytes_held", d.bytes_held},
          {"peak_bytes_held", d.peak_bytes_held}};
}

device_decode_result device_decode_from(const json& j) {
  device_decode_result d;
  // Windows are [images_device, host_fallbacks, images_hardware, images_cuda, pageable_batches,
  // submit_host_s, images_workers, hardware_refusals] (the last two absent in states written before them).
  const auto at_or_0 = [](const json& w, std::size_t k) { return w.size() > k ? w.at(k).get<std::int64_t>() : 0; };
  for (const auto& w : j.at("windows"))
    d.windows.push_back({w.at(0).get<std::int64_t>(), w.at(1).get<std::int64_t>(), w.at(2).get<std::int64_t>(),
                         w.at(3).get<std::int64_t>(), w.at(4).get<std::int64_t>(), w.at(5).get<double>(),
                         at_or_0(w, 6), at_or_0(w, 7)});
  const json& h = j.at("submit_host_s");
  d.submit_host_s = {h.at(0).get<double>(), h.at(1).get<double>(), h.at(2).get<double>(), h.at(3).get<double>(),
                     h.at(4).get<double>()};
  d.images_device = j.at("images_device").get<std::int64_t>();
  d.images_hardware = j.at("images_hardware").get<std::int64_t>();
  d.images_region = j.value("images_region", std::int64_t{0});
  d.state_waits = j.value("state_waits", std::int64_t{0});
  d.hardware_refusals = j.value("hardware_refusals", std::int64_t{0});
  d.hardware_refused_files = j.value("hardware_refused_files", std::int64_t{0});
  d.arena_waits = j.value("arena_waits", std::int64_t{0});
  d.host_wait_s = j.value("host_wait_s", 0.0);
  d.images_cuda = j.at("images_cuda").get<std::int64_t>();
  d.host_fallbacks = j.at("host_fallbacks").get<std::int64_t>();
  d.images_workers = j.value("images_workers", std::int64_t{0});
  d.pageable_batches = j.at("pageable_batches").get<std::int64_t>();
  d.replaced_samples = j.at("replaced_samples").get<std::int64_t>();
  d.bytes_held = j.at("bytes_held").get<std::int64_t>();
  d.peak_bytes_held = j.at("peak_bytes_held").get<std::int64_t>();
  return d;
}

// Counts add up over the rounds (each a fresh process with its own decoder); memory is per
// process, so the pooled figure is the largest any round held.
void pool_device_decode(std::optional<device_decode_result>& into, const device_decode_result& d) {
  if (!into) {
    into = d;
    return;
  }
  append(into->windows, d.windows);
  into->images_device += d.images_device;
  into->images_hardware += d.images_hardware;
  into->images_region += d.images_region;
  into->state_waits += d.state_waits;
  into->hardware_refusals += d.hardware_refusals;
  into->hardware_refused_files += d.hardware_refused_files;
  into->arena_waits += d.arena_waits;
  into->host_wait_s += d.host_wait_s;
  into->images_cuda += d.images_cuda;
  into->host_fallbacks += d.host_fallbacks;
  into->images_workers += d.images_workers;
  into->pageable_batches += d.pageable_batches;
  decode_host_phases& h = into->submit_host_s;
  h.route += d.submit_host_s.route;
  h.hardware += d.submit_host_s.hardware;
  h.cuda += d.submit_host_s.cuda;
  h.host += d.submit_host_s.host;
  h.crop += d.submit_host_s.crop;
  into->replaced_samples += d.replaced_samples;
  into->bytes_held = std::max(into->bytes_held, d.bytes_held);
  into->peak_bytes_held = std::max(into->peak_bytes_held, d.peak_bytes_held);
}

void pool_dist(dist_result& into, const dist_result& d, int process,
               std::vector<std::vector<double>>& allreduce_medians) {
  const auto ranks = std::move(into.ranks);
  into = d;
  allreduce_medians.resize(std::max(allreduce_medians.size(), d.ranks.size()));
  for (std::size_t r = 0; r < into.ranks.size(); ++r) {
    std::vector<window_result> windows = r < ranks.size() ? ranks[r].windows : std::vector<window_result>{};
    append(windows, as_process(d.ranks[r].windows, process));
    into.ranks[r].windows = std::move(windows);
    if (d.ranks[r].allreduce_s_median) allreduce_medians[r].push_back(*d.ranks[r].allreduce_s_median);
    if (!allreduce_medians[r].empty()) into.ranks[r].allreduce_s_median = quantile(allreduce_medians[r], 0.5);
  }
}

json kernel_tops_json(const std::map<std::string, std::vector<kernel_top>>& top) {
  json out = json::object();
  for (const auto& [family, tops] : top) {
    json list = json::array();
    for (const kernel_top& t : tops) list.push_back({t.name, t.seconds, t.kernels});
    out[family] = list;
  }
  return out;
}

json kernel_families_state_json(const kernel_family_result& k) {
  return {{"measured", k.measured}, {"reason", k.reason},   {"source", k.source},   {"batches", k.batches},
          {"kernels", k.kernels},   {"dropped", k.dropped}, {"seconds", k.seconds}, {"top", kernel_tops_json(k.top)}};
}

kernel_family_result kernel_families_from(const json& j) {
  kernel_family_result k;
  k.measured = j.at("measured").get<bool>();
  k.reason = j.at("reason").get<std::string>();
  k.source = j.at("source").get<std::string>();
  k.batches = j.at("batches").get<int>();
  k.kernels = j.at("kernels").get<std::int64_t>();
  k.seconds = j.at("seconds").get<std::map<std::string, double>>();
  k.dropped = j.value("dropped", std::int64_t{0});
  // [name, seconds, kernels] per family; absent in states written before it.
  if (j.contains("top"))
    for (const auto& [family, list] : j.at("top").items())
      for (const auto& t : list)
        k.top[family].push_back({t.at(0).get<std::string>(), t.at(1).get<double>(), t.at(2).get<std::int64_t>()});
  return k;
}

// Measured rounds add up (kernel time and batches); a round that measured nothing adds nothing.
void pool_kernel_families(std::optional<kernel_family_result>& into, const kernel_family_result& k) {
  if (!into || (!into->measured && k.measured)) {
    into = k;
    return;
  }
  if (!k.measured) return;
  into->batches += k.batches;
  into->kernels += k.kernels;
  into->dropped += k.dropped;
  for (const auto& [family, s] : k.seconds) into->seconds[family] += s;
  for (const auto& [family, tops] : k.top) merge_kernel_tops(into->top[family], tops);
}

}  // namespace

json run_result_to_json(const run_result& r) {
  json stages = json::object();
  for (const auto& [name, values] : r.stages_s) stages[name] = values;
  const auto& t = r.telemetry;
  json processes = json::array();
  for (const auto& c : r.processes)
    processes.push_back({opt(c.to_first_window_s), opt(c.build_s), opt(c.warmup_s), opt(c.measured_from_unix_s),
                         opt(c.measured_to_unix_s)});
  return {{"windows", windows_json(r.windows)},
          {"processes", processes},
          {"stages_s", stages},
          {"overlap_shares", r.overlap_shares},
          {"stages_overlap_s", r.stages_overlap_s},
          {"allreduce_span_s", r.allreduce_span_s},
          {"allreduce_launched_in_backward", r.allreduce_launched_in_backward},
          {"dist", r.dist ? dist_json(*r.dist) : json(nullptr)},
          {"loader", r.loader ? loader_state_json(*r.loader) : json(nullptr)},
          {"device_decode", r.device_decode ? device_decode_state_json(*r.device_decode) : json(nullptr)},
          {"kernel_families", r.kernel_families ? kernel_families_state_json(*r.kernel_families) : json(nullptr)},
          {"loss_first", opt(r.loss_first)},
          {"loss_last", opt(r.loss_last)},
          {"skipped_steps", opt(r.skipped_steps)},
          {"skipped_by_cause", r.skipped_by_cause ? json(*r.skipped_by_cause) : json(nullptr)},
          {"input_abs_max", opt(r.input_abs_max)},
          {"loss_scale", opt(r.loss_scale)},
          {"warmup_batches_done", r.warmup_batches_done},
          {"window_batches", r.window_batches},
          {"stopped_by", r.stopped_by},
          {"memory",
           {opt(r.memory.device_peak_allocated_bytes), opt(r.memory.device_peak_reserved_bytes),
            opt(r.memory.host_peak_rss_bytes)}},
          {"telemetry",
           {{"source", t.source},
            {"samples", t.samples},
            {"gpu_util_pct_mean", opt(t.gpu_util_pct_mean)},
            {"mem_util_pct_mean", opt(t.mem_util_pct_mean)},
            {"sm_clock_mhz_mean", opt(t.sm_clock_mhz_mean)},
            {"power_w_mean", opt(t.power_w_mean)},
            {"throttle_reasons_seen", opt(t.throttle_reasons_seen)}}}};
}

run_result run_result_from_json(const json& j) {
  run_result r;
  r.windows = windows_from(j.at("windows"));
  const auto number_or_null = [](const json& v) {
    return v.is_null() ? std::optional<double>() : std::optional<double>(v.get<double>());
  };
  for (const auto& c : j.at("processes"))
    r.processes.push_back({number_or_null(c.at(0)), number_or_null(c.at(1)), number_or_null(c.at(2)),
                           c.size() > 3 ? number_or_null(c.at(3)) : std::nullopt,  // state files before the times
                           c.size() > 4 ? number_or_null(c.at(4)) : std::nullopt});
  for (const auto& [name, values] : j.at("stages_s").items()) r.stages_s[name] = values.get<std::vector<double>>();
  r.overlap_shares = j.at("overlap_shares").get<std::vector<double>>();
  r.stages_overlap_s = j.at("stages_overlap_s").get<std::vector<double>>();
  r.allreduce_span_s = j.at("allreduce_span_s").get<std::vector<double>>();
  r.allreduce_launched_in_backward = j.at("allreduce_launched_in_backward").get<std::vector<double>>();
  if (!j.at("dist").is_null()) r.dist = dist_from(j["dist"]);
  if (j.contains("loader") && !j["loader"].is_null()) r.loader = loader_from(j["loader"]);
  if (j.contains("device_decode") && !j["device_decode"].is_null())
    r.device_decode = device_decode_from(j["device_decode"]);
  if (j.contains("kernel_families") && !j["kernel_families"].is_null())
    r.kernel_families = kernel_families_from(j["kernel_families"]);
  r.loss_first = opt_from<double>(j, "loss_first");
  r.loss_last = opt_from<double>(j, "loss_last");
  r.skipped_steps = opt_from<std::int64_t>(j, "skipped_steps");
  r.skipped_by_cause = opt_from<std::array<std::int64_t, 3>>(j, "skipped_by_cause");
  r.input_abs_max = opt_from<double>(j, "input_abs_max");
  r.loss_scale = opt_from<double>(j, "loss_scale");
  r.warmup_batches_done = j.at("warmup_batches_done").get<std::int64_t>();
  r.window_batches = j.at("window_batches").get<int>();
  r.stopped_by = j.at("stopped_by").get<std::string>();
  const json& m = j.at("memory");
  auto int_or_null = [](const json& v) {
    return v.is_null() ? std::optional<std::int64_t>() : std::optional<std::int64_t>(v.get<std::int64_t>());
  };
  r.memory = {int_or_null(m.at(0)), int_or_null(m.at(1)), int_or_null(m.at(2))};
  const json& t = j.at("telemetry");
  r.telemetry.source = t.at("source").get<std::string>();
  r.telemetry.samples = t.at("samples").get<std::size_t>();
  r.telemetry.gpu_util_pct_mean = opt_from<double>(t, "gpu_util_pct_mean");
  r.telemetry.mem_util_pct_mean = opt_from<double>(t, "mem_util_pct_mean");
  r.telemetry.sm_clock_mhz_mean = opt_from<double>(t, "sm_clock_mhz_mean");
  r.telemetry.power_w_mean = opt_from<double>(t, "power_w_mean");
  r.telemetry.throttle_reasons_seen = opt_from<std::uint64_t>(t, "throttle_reasons_seen");
  return r;
}

namespace {

// The causes add up only where every round with loss scaling counted them (older state files did
// not); the input's largest |value| is unknown (null) once a round saw inf or nan.
void pool_skip_causes(run_result& out, const std::vector<run_result>& rounds) {
  std::array<std::int64_t, 3> sum{};
  double amax = 0.0;
  bool counted = false, complete = true, finite = true;
  for (const auto& r : rounds) {
    if (!r.skipped_steps) continue;
    if (!r.skipped_by_cause) {
      complete = false;
      continue;
    }
    counted = true;
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += (*r.skipped_by_cause)[k];
    if (r.input_abs_max)
      amax = std::max(amax, *r.input_abs_max);
    else
      finite = false;
  }
  if (!counted || !complete) return;
  out.skipped_by_cause = sum;
  if (finite) out.input_abs_max = amax;
}

}  // namespace

run_result pool_rounds(const std::vector<run_result>& rounds) {
  TB_ASSERT(!rounds.empty(), "pooling no rounds");
  run_result out;
  std::vector<std::vector<double>> allreduce_medians;
  int process = 0;
  for (const auto& r : rounds) {
    append(out.windows, as_process(r.windows, process));
    // One entry per round, so windows[i].process indexes the costs of its own process.
    out.processes.push_back(r.processes.empty() ? process_cost{} : r.processes.front());
    for (const auto& [name, values] : r.stages_s) append(out.stages_s[name], values);
    append(out.overlap_shares, r.overlap_shares);
    append(out.stages_overlap_s, r.stages_overlap_s);
    append(out.allreduce_span_s, r.allreduce_span_s);
    append(out.allreduce_launched_in_backward, r.allreduce_launched_in_backward);
    if (r.dist) {
      const bool first = !out.dist;
      if (first) out.dist.emplace();
      const int gathered =
          first ? r.dist->ranks_in_results : std::min(out.dist->ranks_in_results, r.dist->ranks_in_results);
      pool_dist(*out.dist, *r.dist, process, allreduce_medians);
      // A process whose ranks could not be gathered holds one rank's windows: the pool says so.
      out.dist->ranks_in_results = gathered;
    }
    if (r.loader) pool_loader(out.loader, *r.loader);
    if (r.device_decode) pool_device_decode(out.device_decode, *r.device_decode);
    if (r.kernel_families) pool_kernel_families(out.kernel_families, *r.kernel_families);
    if (!out.loss_first) out.loss_first = r.loss_first;
    if (r.loss_last) out.loss_last = r.loss_last;
    if (r.skipped_steps) out.skipped_steps = out.skipped_steps.value_or(0) + *r.skipped_steps;
    if (r.loss_scale) out.loss_scale = r.loss_scale;
    out.warmup_batches_done += r.warmup_batches_done;
    out.window_batches = std::max(out.window_batches, r.window_batches);
    out.stopped_by = r.stopped_by;
    out.memory.device_peak_allocated_bytes =
        larger(out.memory.device_peak_allocated_bytes, r.memory.device_peak_allocated_bytes);
    out.memory.device_peak_reserved_bytes =
        larger(out.memory.device_peak_reserved_bytes, r.memory.device_peak_reserved_bytes);
    out.memory.host_peak_rss_bytes = larger(out.memory.host_peak_rss_bytes, r.memory.host_peak_rss_bytes);
    pool_telemetry(out.telemetry, r.telemetry);
    ++process;
  }
  pool_skip_causes(out, rounds);
  // The job's scaling efficiency over every round's windows, as one run computes it over its own.
  if (out.dist && out.dist->baseline_samples_per_s && !out.windows.empty()) {
    std::vector<double> rates;
    for (const auto& w : out.windows) rates.push_back(w.samples_per_s);
    out.dist->scaling_efficiency = summarize(rates).median / (out.dist->world * *out.dist->baseline_samples_per_s);
  }
  return out;
}

std::vector<run_result> read_rounds(const std::filesystem::path& state) {
  std::vector<run_result> out;
  if (!std::filesystem::exists(state)) return out;
  try {
    const json all = json::parse(read_text_file(state));  // kept: the loop below reads into it
    for (const auto& r : all.at("rounds")) out.push_back(run_result_from_json(r));
  } catch (const json::exception& e) {
    throw input_error("'" + state.string() + "' is not a round state file this version wrote: " + e.what());
  }
  return out;
}

void write_rounds(const std::filesystem::path& state, const std::vector<run_result>& rounds) {
  json all = json::array();
  for (const auto& r : rounds) all.push_back(run_result_to_json(r));
  write_file_atomic(state, json{{"rounds", all}}.dump() + "\n");
}

}  // namespace trainbench
