#pragma once
// Where the loader's workers spend their time, through one narrow interface (as the runner's
// clock is for stages): a worker marks phase boundaries, sinks receive the spans. The built-in
// sink keeps per-worker totals that the runner reads after each window; a trace can add its own.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace trainbench {

// Per image, in the order a worker runs them. `resize` is the crop's antialiased resampling with
// ToTensor + Normalize folded into its last pass, straight into the batch slot.
enum class load_phase { read, decode, resize };
constexpr int load_phase_count = 3;
const char* load_phase_name(load_phase p);  // "read", "decode", "crop_resize"

// Times are steady-clock nanoseconds (std::chrono::steady_clock, the runner's host clock).
// Each call comes from the thread named by `worker`, so a sink can keep one single-writer buffer
// per thread; the ring events (slot_wait, batch_ready, batch_taken) are only sent to a trace.
class load_sink {
 public:
  virtual ~load_sink() = default;
  // Worker `worker` filled batch `batch` into ring slot `slot` (the main thread is worker 0 when
  // there are no workers).
  virtual void batch_filled(int worker, std::int64_t batch, int slot, std::int64_t begin_ns, std::int64_t end_ns) = 0;
  // One phase of one image of that batch.
  virtual void phase(int worker, std::int64_t batch, load_phase p, std::int64_t begin_ns, std::int64_t end_ns) = 0;
  // Before filling `batch`, the worker waited for its slot: for the consumer to release it, then
  // for the copy that read it (its fence).
  virtual void slot_wait(int, std::int64_t /*batch*/, int /*slot*/, std::int64_t /*begin_ns*/,
                         std::int64_t /*end_ns*/) {}
  // With workers: the worker marked `batch` ready; `ready` batches now wait for the consumer.
  virtual void batch_ready(int /*worker*/, std::int64_t /*batch*/, int /*ready*/, std::int64_t /*at_ns*/) {}
  // With workers: the consumer (the training thread) took `batch`; `ready` batches are left.
  virtual void batch_taken(std::int64_t /*batch*/, int /*ready*/, std::int64_t /*at_ns*/) {}
};

struct load_totals {
  std::int64_t batches = 0, images = 0;
  double fill_s = 0;                      // summed over workers: time spent filling batches
  double phase_s[load_phase_count] = {};  // summed over workers and images
  load_totals operator-(const load_totals& earlier) const;
};

// Per-worker totals without locks: each worker writes only its own cache line.
class load_counters final : public load_sink {
 public:
  explicit load_counters(int workers);
  void batch_filled(int worker, std::int64_t batch, int slot, std::int64_t begin_ns, std::int64_t end_ns) override;
  void phase(int worker, std::int64_t batch, load_phase p, std::int64_t begin_ns, std::int64_t end_ns) override;
  void count_images(int worker, std::int64_t images);
  load_totals totals() const;  // any thread, any time

 private:
  struct alignas(64) slot {
    std::atomic<std::int64_t> batches{0}, images{0}, fill_ns{0};
    std::atomic<std::int64_t> phase_ns[load_phase_count] = {};
  };
  std::unique_ptr<slot[]> slots_;
  int count_;
};

std::int64_t steady_now_ns();

// A worker's marks for one batch: begin(p) ends the running phase and starts p; one clock read each.
class phase_marker {
 public:
  phase_marker(const std::vector<load_sink*>& sinks, int worker, std::int64_t batch)
      : sinks_(sinks), worker_(worker), batch_(batch) {}
  ~phase_marker() { end(); }
  phase_marker(const phase_marker&) = delete;
  phase_marker& operator=(const phase_marker&) = delete;
  void begin(load_phase p);
  void end();

 private:
  const std::vector<load_sink*>& sinks_;
  int worker_;
  std::int64_t batch_;
  bool running_ = false;
  load_phase phase_ = load_phase::read;
  std::int64_t since_ = 0;
};

}  // namespace trainbench
