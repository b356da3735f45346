#include "trainbench/measure/trace.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>

#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"

namespace trainbench {

namespace {

// Thread ids in the file: the viewers order lanes by these (thread_sort_index).
constexpr int training_tid = 1, compute_tid = 2, copy_tid = 3, first_worker_tid = 10;
constexpr std::size_t max_ring_events = std::size_t{1} << 19;
constexpr std::size_t telemetry_capacity = 4096;  // 400 s of NVML readings between two windows

// ns on the host steady clock to the file's microseconds, exactly (integer arithmetic).
void put_us(std::string& out, std::int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  fmt::format_to(std::back_inserter(out), "{}.{:03}", ns / 1000, ns % 1000);
}

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

}  // namespace

// Single writer (its thread), read by the training thread between windows. When full, the oldest
// event goes: during warmup that is expected (only the newest, prefetched batches matter), inside
// a window it is counted as lost.
class alignas(64) trace_recorder::ring {
 public:
  explicit ring(std::size_t capacity) : items_(capacity) {}
  void push(const load_event& e, std::int64_t wanted_from) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (size_ == items_.size()) {
      if (items_[head_].batch >= wanted_from) ++lost_;
      head_ = (head_ + 1) % items_.size();
      --size_;
    }
    items_[(head_ + size_) % items_.size()] = e;
    ++size_;
  }
  // Keeps what it holds (measure.min_window_s can make the windows longer than planned).
  void grow(std::size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (capacity <= items_.size()) return;
    std::vector<load_event> bigger(capacity);
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = items_[(head_ + i) % items_.size()];
    items_.swap(bigger);
    head_ = 0;
  }
  std::size_t drain(std::vector<load_event>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < size_; ++i) out.push_back(items_[(head_ + i) % items_.size()]);
    head_ = size_ = 0;
    const std::size_t lost = lost_;
    lost_ = 0;
    return lost;
  }

 private:
  std::mutex mutex_;
  std::vector<load_event> items_;
  std::size_t head_ = 0, size_ = 0, lost_ = 0;
};

struct trace_recorder::out_event {
  char ph = 'X';  // X: span, C: counter, s / t / f: flow start, step, end
  int tid = training_tid;
  std::int64_t ts = 0, dur = 0;  // ns on the host clock
  const char* name = "";
  const char* cat = "";
  std::int64_t batch = -1;      // args.batch (flows: the id)
  std::int64_t for_batch = -1;  // data_wait, h2d: the batch whose data they fetch or copy
  int slot = -1;
  int done = -1;              // windows: the batches that finished
  const char* key = nullptr;  // counters: the series
  double value = 0;
};

std::size_t trace_capacity(const trace_options& o) {
  const std::size_t threads = static_cast<std::size_t>(std::max(1, o.workers));
  const std::size_t batches =
      ceil_div(static_cast<std::size_t>(std::max(1, o.measured_batches)), threads) + o.ring_slots + 2;
  const std::size_t per_batch =
      3 + (o.image_phases ? static_cast<std::size_t>(load_phase_count) * static_cast<std::size_t>(o.batch_size) : 0);
  return std::min(max_ring_events, std::max<std::size_t>(64, batches * per_batch));
}

namespace {
// The training thread's ring: one take per batch of a window and the loader's prefetch.
std::size_t consumer_capacity(const trace_options& o) {
  return std::max<std::size_t>(64, static_cast<std::size_t>(o.measured_batches + o.ring_slots) + 2);
}
}  // namespace

trace_recorder::trace_recorder(trace_options o) : options_(std::move(o)) {
  namespace fs = std::filesystem;
  const fs::path target(options_.path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  temp_path_ = options_.path + ".tmp." + std::to_string(::getpid());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) throw config_error("", "measure.trace", "cannot write '" + options_.path + "': " + std::strerror(errno));
  origin_ns_ = steady_now_ns();
  const std::size_t capacity = trace_capacity(options_);
  const int fillers = std::max(1, options_.workers);
  for (int w = 0; w < fillers; ++w) rings_.push_back(std::make_unique<ring>(capacity));
  // The consumer's ring: one take per batch.
  rings_.push_back(std::make_unique<ring>(consumer_capacity(options_)));
  pending_.reserve(capacity * rings_.size());
  const auto n = static_cast<std::size_t>(std::max(1, options_.measured_batches));
  fill_of_.resize(n);
  taken_of_.resize(n);
  batch_of_.resize(n);
  write_header();
}

// measure.min_window_s chose another window length than measure.measured_batches (once, before
// the first window): the rings and the per-batch indexes follow it.
void trace_recorder::resize_window(int batches) {
  options_.measured_batches = std::max(1, batches);
  const std::size_t capacity = trace_capacity(options_);
  for (std::size_t i = 0; i + 1 < rings_.size(); ++i) rings_[i]->grow(capacity);
  rings_.back()->grow(consumer_capacity(options_));
  pending_.reserve(capacity * rings_.size());
  const auto n = static_cast<std::size_t>(options_.measured_batches);
  fill_of_.resize(n);
  taken_of_.resize(n);
  batch_of_.resize(n);
}

trace_recorder::~trace_recorder() {
  if (file_) std::fclose(file_);
  if (!closed_) std::remove(temp_path_.c_str());
}

int trace_recorder::tid_of_worker(int worker) const {
  return options_.workers == 0 ? training_tid : first_worker_tid + worker;
}

// A worker's span on its lane; the caller names it.
trace_recorder::out_event trace_recorder::load_span(const load_event& e) const {
  out_event o;
  o.tid = tid_of_worker(std::max<int>(0, e.worker));
  o.ts = e.begin_ns;
  o.dur = e.end_ns - e.begin_ns;
  o.cat = "load";
  o.batch = e.batch;
  return o;
}

void trace_recorder::push(int ring_index, const load_event& e) {
  rings_[static_cast<std::size_t>(ring_index)]->push(e, wanted_from_.load(std::memory_order_relaxed));
}

void trace_recorder::batch_filled(int worker, std::int64_t batch, int slot, std::int64_t begin_ns,
                                  std::int64_t end_ns) {
  push(worker, {batch, begin_ns, end_ns, slot, static_cast<std::int16_t>(worker), load_event::fill});
}

void trace_recorder::phase(int worker, std::int64_t batch, load_phase p, std::int64_t begin_ns, std::int64_t end_ns) {
  push(worker,
       {batch, begin_ns, end_ns, static_cast<std::int32_t>(p), static_cast<std::int16_t>(worker), load_event::phase});
}

void trace_recorder::slot_wait(int worker, std::int64_t batch, int slot, std::int64_t begin_ns, std::int64_t end_ns) {
  push(worker, {batch, begin_ns, end_ns, slot, static_cast<std::int16_t>(worker), load_event::wait});
}

void trace_recorder::batch_ready(int worker, std::int64_t batch, int ready, std::int64_t at_ns) {
  push(worker, {batch, at_ns, at_ns, ready, static_cast<std::int16_t>(worker), load_event::ready});
}

void trace_recorder::batch_taken(std::int64_t batch, int ready, std::int64_t at_ns) {
  push(static_cast<int>(rings_.size()) - 1, {batch, at_ns, at_ns, ready, -1, load_event::taken});
}

void trace_recorder::watch(device_probe* probe) {
  probe_ = probe;
  if (probe_) probe_->keep_samples(telemetry_capacity);
  samples_.reserve(telemetry_capacity);
}

namespace {
// A metadata event: a name (quoted) or a sort index (a number).
void put_meta(std::string& out, int pid, int tid, const char* what, const std::string& value, bool sort) {
  fmt::format_to(std::back_inserter(out),
                 "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"{}\",\"args\":{{\"{}\":", pid, tid, what,
                 sort ? "sort_index" : "name");
  if (sort) {
    out += value;
  } else {
    out += '"';
    for (char c : value) out += (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) ? '_' : c;
    out += '"';
  }
  out += "}},\n";
}
}  // namespace

void trace_recorder::name_thread(int tid, const std::string& name) {
  put_meta(text_, options_.rank, tid, "thread_name", name, false);
  put_meta(text_, options_.rank, tid, "thread_sort_index", std::to_string(tid), true);
}

void trace_recorder::write_header() {
  text_ = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  put_meta(text_, options_.rank, training_tid, "process_name", options_.label, false);
  put_meta(text_, options_.rank, training_tid, "process_sort_index", std::to_string(options_.rank), true);
  name_thread(training_tid, "training thread");
  for (int w = 0; w < options_.workers; ++w) name_thread(first_worker_tid + w, "loader worker " + std::to_string(w));
  // Every event is followed by ",\n"; close() ends the array with one more metadata event, so the
  // JSON never has a trailing comma.
}

void trace_recorder::window_begin(std::int64_t first_batch, int batches) {
  if (batches != options_.measured_batches) resize_window(batches);
  first_batch_ = first_batch;
  wanted_from_.store(first_batch, std::memory_order_relaxed);
  // What the workers did before (warmup, the gap after the last window) for batches this window
  // never trains is dropped; the prefetched batches stay.
  for (auto& r : rings_) r->drain(pending_);
  pending_.erase(
      std::remove_if(pending_.begin(), pending_.end(), [&](const load_event& e) { return e.batch < first_batch; }),
      pending_.end());
  window_begin_ns_ = steady_now_ns();
}

void trace_recorder::window_end(const window_times& times) { write_window(times, options_.measured_batches); }

void trace_recorder::window_failed(const window_times& times, int batches_done) {
  write_window(times, std::min(batches_done, options_.measured_batches));
}

void trace_recorder::write_window(const window_times& times, int batches_done) {
  const bool complete = batches_done >= options_.measured_batches;
  const std::int64_t end_ns = steady_now_ns();
  const std::int64_t last = first_batch_ + options_.measured_batches - 1;
  wanted_from_.store(last + 1, std::memory_order_relaxed);
  for (auto& r : rings_) lost_ += r->drain(pending_);
  if (!complete) drop_unfilled_phases();
  events_.clear();
  std::fill(fill_of_.begin(), fill_of_.end(), nullptr);
  std::fill(taken_of_.begin(), taken_of_.end(), nullptr);
  std::fill(batch_of_.begin(), batch_of_.end(), nullptr);

  out_event w;
  w.ts = window_begin_ns_;
  w.dur = end_ns - window_begin_ns_;
  w.name = complete ? "measured window" : "measured window (incomplete)";
  w.cat = "window";
  w.batch = first_batch_;
  w.slot = static_cast<int>(window_);
  w.done = batches_done;
  w.value = static_cast<double>(times.calibration_ns) / 1000.0;
  events_.push_back(w);
  collect_stage_spans(times);
  collect_loader_events();
  collect_flows();
  collect_telemetry();
  // Events of later batches (prefetched) wait for the window that trains them.
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const load_event& e) { return e.batch <= last; }),
                 pending_.end());
  flush_events();
  last_window_begin_ns_ = window_begin_ns_;
  last_window_end_ns_ = end_ns;
  ++(complete ? window_ : incomplete_);
}

// Phases of a fill that did not finish (a worker still at it, or a failure that cut it short)
// have no fill span to sit in.
void trace_recorder::drop_unfilled_phases() {
  std::vector<std::int64_t> filled;
  for (const load_event& e : pending_)
    if (e.kind == load_event::fill) filled.push_back(e.batch);
  std::sort(filled.begin(), filled.end());
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const load_event& e) {
                                  return e.kind == load_event::phase &&
                                         !std::binary_search(filled.begin(), filled.end(), e.batch);
                                }),
                 pending_.end());
}

void trace_recorder::collect_stage_spans(const window_times& times) {
  for (const stage_span& s : times.spans) {
    out_event e;
    e.tid = s.lane == span_lane::host ? training_tid : s.lane == span_lane::compute_stream ? compute_tid : copy_tid;
    e.ts = s.begin_ns;
    e.dur = s.end_ns - s.begin_ns;
    e.name = stage_name(s.stage);
    e.cat = s.measured ? "stage" : "launch";
    e.batch = first_batch_ + s.row;
    if (s.stage == stage_id::data_wait || s.stage == stage_id::h2d) e.for_batch = e.batch + lookahead_;
    events_.push_back(e);
    if (s.stage == stage_id::batch && s.lane == span_lane::host && s.row < options_.measured_batches)
      batch_of_[static_cast<std::size_t>(s.row)] = &s;
  }
}

void trace_recorder::collect_loader_events() {
  const std::int64_t last = first_batch_ + options_.measured_batches - 1;
  for (const load_event& e : pending_) {
    if (e.batch > last || e.batch < first_batch_) continue;
    const auto row = static_cast<std::size_t>(e.batch - first_batch_);
    out_event o = load_span(e);
    switch (e.kind) {
      case load_event::fill:
        o.name = "fill";
        o.slot = e.value;
        fill_of_[row] = &e;
        break;
      case load_event::phase:
        o.name = load_phase_name(static_cast<load_phase>(e.value));
        break;
      case load_event::wait:
        o.name = "slot_wait";
        o.slot = e.value;
        break;
      case load_event::taken:
        taken_of_[row] = &e;
        [[fallthrough]];
      case load_event::ready:
        o.ph = 'C';
        o.name = "loader ring";
        o.key = "ready batches";
        o.value = e.value;
        o.dur = 0;
        break;
    }
    events_.push_back(o);
  }
}

// Each measured batch's data: from the worker's fill, through the training thread's take (in
// data_wait), to the batch that trained on it.
void trace_recorder::collect_flows() {
  if (options_.workers == 0) return;  // the training thread filled it itself
  for (std::size_t row = 0; row < fill_of_.size(); ++row) {
    const load_event* fill = fill_of_[row];
    const stage_span* batch = batch_of_[row];
    if (!fill || !batch) continue;
    const std::int64_t id = first_batch_ + static_cast<std::int64_t>(row);
    out_event s;
    s.ph = 's';
    s.tid = tid_of_worker(fill->worker);
    s.ts = fill->begin_ns + (fill->end_ns - fill->begin_ns) / 2;
    s.name = "batch data";
    s.cat = "flow";
    s.batch = id;
    events_.push_back(s);
    const load_event* taken = taken_of_[row];
    if (taken && taken->begin_ns > window_begin_ns_ && taken->begin_ns > s.ts && taken->begin_ns < batch->end_ns) {
      out_event t = s;
      t.ph = 't';
      t.tid = training_tid;
      t.ts = taken->begin_ns;
      events_.push_back(t);
    }
    out_event f = s;
    f.ph = 'f';
    f.tid = training_tid;
    f.ts = batch->begin_ns + (batch->end_ns - batch->begin_ns) / 2;
    events_.push_back(f);
  }
}

void trace_recorder::collect_telemetry() {
  if (!probe_) return;
  samples_.clear();
  lost_samples_ += probe_->take_samples(samples_);
  for (const telemetry_sample& s : samples_) {
    const std::pair<const char*, double> series[] = {
        {"GPU utilization", s.gpu_util_pct}, {"SM clock", s.sm_clock_mhz}, {"power", s.power_w}};
    const char* units[] = {"%", "MHz", "W"};
    for (int i = 0; i < 3; ++i) {
      if (series[i].second < 0) continue;
      out_event c;
      c.ph = 'C';
      c.ts = s.at_ns;
      c.name = series[i].first;
      c.cat = "nvml";
      c.key = units[i];
      c.value = series[i].second;
      events_.push_back(c);
    }
  }
}

// Sorted by time, a parent before its children (longer first at the same start), so viewers that
// nest spans as they read them see them in order.
void trace_recorder::flush_events() {
  std::sort(events_.begin(), events_.end(), [](const out_event& a, const out_event& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    return a.dur > b.dur;
  });
  const int pid = options_.rank;
  for (const out_event& e : events_) {
    if ((e.tid == compute_tid || e.tid == copy_tid) && !device_lanes_named_[e.tid - compute_tid]) {
      device_lanes_named_[e.tid - compute_tid] = true;
      name_thread(e.tid, e.tid == compute_tid ? "GPU compute stream" : "GPU copy stream");
    }
    fmt::format_to(std::back_inserter(text_), "{{\"ph\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":", e.ph, pid, e.tid);
    put_us(text_, e.ts - origin_ns_);
    if (e.ph == 'X') {
      text_ += ",\"dur\":";
      put_us(text_, e.dur);
    }
    fmt::format_to(std::back_inserter(text_), ",\"name\":\"{}\",\"cat\":\"{}\"", e.name, e.cat);
    if (e.ph == 'C') {
      fmt::format_to(std::back_inserter(text_), ",\"args\":{{\"{}\":{}}}", e.key, e.value);
    } else if (e.ph == 's' || e.ph == 't' || e.ph == 'f') {
      fmt::format_to(std::back_inserter(text_), ",\"id\":{}{}", e.batch, e.ph == 'f' ? ",\"bp\":\"e\"" : "");
    } else if (std::strcmp(e.cat, "window") == 0) {
      fmt::format_to(std::back_inserter(text_),
                     ",\"args\":{{\"window\":{},\"first_batch\":{},\"batches\":{},\"batches_done\":{},"
                     "\"calibration_us\":{}}}",
                     e.slot, e.batch, options_.measured_batches, e.done, e.value);
    } else if (e.for_batch >= 0) {
      fmt::format_to(std::back_inserter(text_), ",\"args\":{{\"batch\":{},\"for_batch\":{}}}", e.batch, e.for_batch);
    } else if (e.slot >= 0) {
      fmt::format_to(std::back_inserter(text_), ",\"args\":{{\"batch\":{},\"slot\":{}}}", e.batch, e.slot);
    } else {
      fmt::format_to(std::back_inserter(text_), ",\"args\":{{\"batch\":{}}}", e.batch);
    }
    text_ += "},\n";
  }
  if (!text_.empty() && std::fwrite(text_.data(), 1, text_.size(), file_) != text_.size())
    throw run_error("trace", "cannot write '" + temp_path_ + "': " + std::strerror(errno));
  text_.clear();  // keeps its capacity for the next window
}

void trace_recorder::close(const std::string& status) {
  if (closed_ || !file_) return;
  // Prefetched fills still pending that ran inside the last window: the workers' side of it.
  events_.clear();
  for (auto& r : rings_) r->drain(pending_);
  drop_unfilled_phases();  // a worker may still be filling a batch: its phases so far are here, its fill is not
  for (const load_event& e : pending_) {
    const bool in_last_window = e.begin_ns < last_window_end_ns_ && e.end_ns > last_window_begin_ns_;
    if (window_ + incomplete_ == 0 || !in_last_window || e.kind == load_event::ready || e.kind == load_event::taken)
      continue;
    out_event o = load_span(e);
    o.name = e.kind == load_event::fill   ? "fill"
             : e.kind == load_event::wait ? "slot_wait"
                                          : load_phase_name(static_cast<load_phase>(e.value));
    if (e.kind != load_event::phase) o.slot = e.value;
    events_.push_back(o);
  }
  pending_.clear();
  flush_events();
  fmt::format_to(std::back_inserter(text_),
                 "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"trace_end\",\"args\":{{}}}}\n],\n"
                 "\"otherData\":{{\"tool\":\"trainbench\",\"format\":1,\"status\":\"{}\",\"rank\":{},"
                 "\"windows\":{},\"incomplete_windows\":{},\"measured_batches\":{},\"loader_workers\":{},"
                 "\"lost_events\":{},\"lost_telemetry_samples\":{},\"steady_clock_origin_ns\":{}}}}}\n",
                 options_.rank, training_tid, status, options_.rank, window_, incomplete_, options_.measured_batches,
                 options_.workers, lost_, lost_samples_, origin_ns_);
  const bool written = std::fwrite(text_.data(), 1, text_.size(), file_) == text_.size();
  const bool flushed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!written || !flushed) throw run_error("trace", "cannot write '" + temp_path_ + "': " + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(temp_path_, options_.path, ec);
  if (ec) throw run_error("trace", "cannot rename '" + temp_path_ + "' to '" + options_.path + "': " + ec.message());
  closed_ = true;
  if (lost_ > 0)
    log_warn("trace: " + std::to_string(lost_) +
             " loader events of measured batches did not fit the rings and are missing from " + options_.path);
}

}  // namespace trainbench
