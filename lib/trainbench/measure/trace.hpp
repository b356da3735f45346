#pragma once
// --trace: a Chrome trace-event JSON file (what Perfetto's UI and chrome://tracing open) of every
// measured batch. A sink like the clock: the runner hands it each window's stage spans (the
// clock's own measurements, placed on the host clock) and the loader's workers write their fills
// into it through load_sink; stages never see it.
//
// Cost: nothing when off (no sink, no spans kept). When on, workers append fixed-size events to
// their own preallocated ring (one uncontended lock per event), and the runner reads the rings and
// writes the window's events to the file after each window, outside the measured time. Memory is
// bounded by the rings: 32 bytes per event, sized for one window of fills (see trace_capacity).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainbench/data/load_timing.hpp"
#include "trainbench/measure/clock.hpp"
#include "trainbench/measure/probe.hpp"

namespace trainbench {

struct trace_options {
  std::string path;   // {rank} already replaced
  std::string label;  // the process's name in the viewer (profile name, rank)
  int rank = 0;
  int workers = 0;           // loader worker threads; 0: the training thread fills the batches
  int ring_slots = 2;        // the loader's batch buffers
  int measured_batches = 1;  // per window (measure.min_window_s may change it before the first)
  std::int64_t batch_size = 1;
  bool image_phases = false;  // the source reports read / decode / crop_resize / normalize per image
};

// One loader event as a worker records it (fixed size: the rings never allocate).
struct load_event {
  enum kind_t : std::uint8_t { fill, phase, wait, ready, taken };
  std::int64_t batch = 0, begin_ns = 0, end_ns = 0;
  std::int32_t value = 0;   // fill, wait: the slot; phase: load_phase; ready, taken: ready batches after
  std::int16_t worker = 0;  // the filling thread (taken: -1, the consumer)
  kind_t kind = fill;
};

// Events each ring holds: one window of batches per worker plus the ring's prefetch, each with its
// fill, slot wait, ready mark and (image folders) each image's load phases. At most 2^19 (16 MiB).
std::size_t trace_capacity(const trace_options& o);

class trace_recorder final : public load_sink {
 public:
  // Opens the file (its parent folders are made); throws config_error naming measure.trace when
  // it cannot be written.
  explicit trace_recorder(trace_options o);
  ~trace_recorder() override;  // without close(): removes the partial file
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;

  // load_sink, from the loader's threads.
  void batch_filled(int worker, std::int64_t batch, int slot, std::int64_t begin_ns, std::int64_t end_ns) override;
  void phase(int worker, std::int64_t batch, load_phase p, std::int64_t begin_ns, std::int64_t end_ns) override;
  void slot_wait(int worker, std::int64_t batch, int slot, std::int64_t begin_ns, std::int64_t end_ns) override;
  void batch_ready(int worker, std::int64_t batch, int ready, std::int64_t at_ns) override;
  void batch_taken(std::int64_t batch, int ready, std::int64_t at_ns) override;

  // NVML readings become counter tracks (probes without a sampler give none).
  void watch(device_probe* probe);
  // The transfer's lookahead: the data_wait and h2d of batch i fetch and copy batch i + lookahead.
  void set_lookahead(int batches) { lookahead_ = batches; }
  // From the training thread, around each window (outside the measured time): the window trains
  // batches first_batch .. first_batch + batches - 1 (the runner's batch numbers, which are also
  // the loader's: batch i carries the loader's batch i).
  void window_begin(std::int64_t first_batch, int batches);
  void window_end(const window_times& times);
  // The window failed or was interrupted after `batches_done` of its batches: what it recorded up
  // to then is written, under a span named "measured window (incomplete)".
  void window_failed(const window_times& times, int batches_done);
  // Writes the rest and moves the file into place; `status` is the run's ("ok", "error",
  // "interrupted"), for otherData.
  void close(const std::string& status = "ok");
  const std::string& path() const { return options_.path; }
  std::size_t lost_events() const { return lost_; }

 private:
  class ring;
  struct out_event;
  void push(int ring_index, const load_event& e);
  int tid_of_worker(int worker) const;
  out_event load_span(const load_event& e) const;
  void resize_window(int batches);
  void write_window(const window_times& times, int batches_done);
  void drop_unfilled_phases();
  void write_header();
  void name_thread(int tid, const std::string& name);
  void collect_stage_spans(const window_times& times);
  void collect_loader_events();
  void collect_flows();
  void collect_telemetry();
  void flush_events();

  trace_options options_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  bool closed_ = false;
  bool device_lanes_named_[2] = {false, false};  // the GPU streams get a lane once they have spans
  std::int64_t origin_ns_ = 0;
  std::vector<std::unique_ptr<ring>> rings_;  // one per filling thread, then the consumer's
  std::vector<load_event> pending_;           // read from the rings, not yet written
  std::vector<out_event> events_;             // this window's, sorted before writing
  std::string text_;
  device_probe* probe_ = nullptr;
  std::vector<telemetry_sample> samples_;
  // Per batch of the window: where its fill, take and training-thread batch span are.
  std::vector<const load_event*> fill_of_, taken_of_;
  std::vector<const stage_span*> batch_of_;
  int lookahead_ = 0;
  std::int64_t first_batch_ = 0, window_begin_ns_ = 0;
  std::int64_t window_ = 0, incomplete_ = 0;  // windows written: complete, and the one a failure cut short
  std::int64_t last_window_begin_ns_ = 0, last_window_end_ns_ = 0;
  std::size_t lost_ = 0, lost_samples_ = 0;
  // Events of batches from here on belong to a window: overwriting one in a full ring loses it.
  std::atomic<std::int64_t> wanted_from_{std::numeric_limits<std::int64_t>::max()};
};

}  // namespace trainbench
