#pragma once
// Per-stage timing, owned by the runner. Stages never see a clock.
#include <array>
#include <memory>
#include <optional>
#include <vector>

namespace trainbench {

// allreduce: waiting for the gradient all-reduce after backward (data-parallel runs only).
enum class stage_id { data_wait, h2d, preprocess, forward, backward, allreduce, optimizer, batch };
constexpr int stage_count = 8;
const char* stage_name(stage_id s);

struct window_times {
  // Seconds per measured batch and stage; negative where a stage did not run.
  std::vector<std::array<double, stage_count>> per_batch;
  // Share of copy time that ran while the compute stream was busy (copy stream only).
  std::optional<double> overlap_share;
};

class stage_clock {
 public:
  virtual ~stage_clock() = default;
  // Synchronises the device, then starts the wall clock of a window of `batches`.
  virtual void start_window(int batches) = 0;
  virtual void begin(stage_id s, int batch) = 0;
  virtual void end(stage_id s, int batch) = 0;
  // Synchronises the device, reads every timer and returns the window's wall time in seconds.
  virtual double finish_window(window_times& out) = 0;
  virtual const char* kind() const = 0;
};

// Host steady clock: exact on a CPU device, where every stage returns when its work is done.
std::unique_ptr<stage_clock> make_host_clock();

}  // namespace trainbench
