#pragma once
// The measurement protocol in one place: warm up, measure windows, summarise.
#include <functional>
#include <memory>
#include <string>

#include "trainbench/config/profile.hpp"
#include "trainbench/data/loader.hpp"
#include "trainbench/distributed/grad_sync.hpp"
#include "trainbench/distributed/process_group.hpp"
#include "trainbench/measure/clock.hpp"
#include "trainbench/measure/kernel_families.hpp"
#include "trainbench/measure/probe.hpp"
#include "trainbench/measure/trace.hpp"
#include "trainbench/report/run_result.hpp"
#include "trainbench/stages/device_decode.hpp"
#include "trainbench/stages/preprocess.hpp"
#include "trainbench/stages/train_step.hpp"
#include "trainbench/stages/transfer.hpp"

namespace trainbench {

// Stages bound to a device, ready to run (built by build_pipeline).
struct pipeline {
  std::unique_ptr<process_group> group;      // data-parallel runs only; outlives every stage
  std::unique_ptr<trace_recorder> trace;     // measure.trace only; outlives the loader that writes to it
  std::unique_ptr<transfer_stage> transfer;  // null for device-synthetic
  // Declared after the transfer, so destroyed before it: the loader's destructor waits on copy
  // fences that point at the transfer stage's events.
  std::unique_ptr<batch_loader> loader;           // null for device-synthetic
  std::unique_ptr<device_preprocess> preprocess;  // data.preprocess: device
  std::unique_ptr<train_step> step;               // null for bench-data (loader and transfer only)
  std::unique_ptr<grad_sync> sync;                // data-parallel runs: hooks on the step's parameters
  device_batch fixed;                             // device-synthetic's one batch
  std::unique_ptr<stage_clock> clock;
  std::unique_ptr<device_probe> probe;
  // measure.kernel_families: null where they cannot be measured, with the reason beside it.
  std::unique_ptr<kernel_recorder> kernels;
  std::string kernels_not_measured;
  // What the families' names cannot tell apart in this step, added to a measured result's source.
  std::string kernels_caveat;
  std::int64_t batch_size = 0;
};

// Called after every batch: phase ("warmup" / "measure"), batch in phase, batches in phase, and
// samples/s of the last finished window (0 before the first; never a reading inside a window,
// which on a GPU would only time the host queueing work).
using progress_fn =
    std::function<void(const char* phase, std::int64_t done, std::int64_t total, double last_window_rate)>;

// measure.min_window_s: the batches the next calibration window should run, after one of
// `batches` lasted `elapsed_s` (aims 20% above the minimum, grows at most 10x at a time);
// `batches` itself once the window was long enough.
double window_batches_wanted(int batches, double elapsed_s, double min_window_s);

class runner {
 public:
  runner(pipeline& p, const measure_config& m, progress_fn progress = {});
  // Warms up, then measures the profile's windows; on an exception, result() still holds the
  // windows completed so far. Calling it again adds another warmup and more windows.
  void run();
  const run_result& result() const { return result_; }

 private:
  int warmup_count() const;
  void warmup();
  void calibrate();
  void measure_window(int repeat);
  void trace_failed_window(int batches_done);
  std::int64_t run_batch(int row);  // returns samples; row: batch within the window, -1 during warmup
  void fetch(int row);
  template <class F>
  void timed(stage_id s, int row, std::int64_t batch, F&& work);
  void read_loss(std::optional<double>& into);
  void read_scaler(const grad_scaler& s);
  bool more_windows(std::size_t first, int done);
  void record_sync();
  void record_kernel_families();
  void record_loader(const load_totals& delta, double elapsed);
  void record_device_decode(const device_decode_counts& before, const device_decode_counts& now);

  pipeline& p_;
  measure_config m_;
  progress_fn progress_;
  run_result result_;
  int window_batches_ = 0;  // measure.measured_batches, or more for measure.min_window_s
  static constexpr int max_calibrations = 12;
  bool calibrated_ = false;
  std::int64_t next_batch_ = 0;  // batches started
  std::int64_t submitted_ = 0;   // batches handed to the transfer stage
  bool stage_ranges_ = false, batch_ranges_ = false;
};

}  // namespace trainbench
