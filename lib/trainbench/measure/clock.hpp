#pragma once
// Per-stage timing, owned by the runner. Stages never see a clock.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace trainbench {

// allreduce: waiting for the gradient all-reduce after backward (data-parallel runs only).
// step: forward, loss, backward and optimizer as one replayed CUDA graph (backend.cuda_graph),
// in place of the three stages it fuses.
enum class stage_id { data_wait, h2d, preprocess, forward, backward, allreduce, optimizer, step, batch };
constexpr int stage_count = 9;
const char* stage_name(stage_id s);

// Where a span ran: the training thread, or a CUDA stream (events placed on the host clock).
enum class span_lane { host, compute_stream, copy_stream };

// One timed stage of one batch, on the host steady clock (std::chrono::steady_clock, ns).
struct stage_span {
  stage_id stage = stage_id::batch;
  int row = 0;  // batch within the window
  span_lane lane = span_lane::host;
  // false: on CUDA, the host's side of a stage the device times (when the host enqueued it);
  // such spans are not the measurement and are not in the stage totals.
  bool measured = true;
  std::int64_t begin_ns = 0, end_ns = 0;
};

struct window_times {
  // Seconds per measured batch and stage; negative where a stage did not run.
  std::vector<std::array<double, stage_count>> per_batch;
  // Share of copy time that ran while the compute stream was busy (copy stream only).
  std::optional<double> overlap_share;
  // Only with keep_spans(true): the same measurements as per_batch, with their positions.
  std::vector<stage_span> spans;
  // CUDA with keep_spans: how far the device spans may be off the host clock (fit_clock's bound,
  // from the brackets around the window's two reference events); 0 on the host clock.
  std::int64_t calibration_ns = 0;
};

class stage_clock {
 public:
  virtual ~stage_clock() = default;
  // A trace wants every span's position, not only its length. Off by default: on CUDA it costs
  // one host clock read per mark and an event synchronisation before each window.
  void keep_spans(bool on) { spans_ = on; }
  // Synchronises the device, then starts the wall clock of a window of `batches`.
  virtual void start_window(int batches) = 0;
  virtual void begin(stage_id s, int batch) = 0;
  virtual void end(stage_id s, int batch) = 0;
  // Synchronises the device, reads every timer and returns the window's wall time in seconds.
  virtual double finish_window(window_times& out) = 0;
  virtual const char* kind() const = 0;

 protected:
  bool spans_ = false;
};

// Host steady clock: exact on a CPU device, where every stage returns when its work is done.
std::unique_ptr<stage_clock> make_host_clock();

}  // namespace trainbench
