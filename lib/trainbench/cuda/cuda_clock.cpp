// Stage times from CUDA events: created once per window size, recorded on the stream that runs
// the stage, read only after the window's closing synchronisation.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "trainbench/cuda/cuda_check.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cuda_transfer.hpp"
#include "trainbench/measure/clock_fit.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {

using steady = std::chrono::steady_clock;

class cuda_clock final : public stage_clock {
 public:
  cuda_clock(c10::Device device, std::optional<c10::cuda::CUDAStream> copy) : device_(device), copy_(copy) {}
  ~cuda_clock() override {
    for (cudaEvent_t e : events_) TB_CUDA_WARN(cudaEventDestroy(e));
    if (origin_event_) TB_CUDA_WARN(cudaEventDestroy(origin_event_));
    if (closing_event_) TB_CUDA_WARN(cudaEventDestroy(closing_event_));
  }

  void start_window(int batches) override {
    c10::cuda::CUDAGuard guard(device_);
    const std::size_t needed = static_cast<std::size_t>(batches) * stage_count * 2;
    while (events_.size() < needed) {
      cudaEvent_t e;
      TB_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    if (!origin_event_) TB_CUDA_CHECK(cudaEventCreate(&origin_event_));
    if (!closing_event_) TB_CUDA_CHECK(cudaEventCreate(&closing_event_));
    recorded_.assign(needed, false);
    host_begin_.assign(static_cast<std::size_t>(batches), {});
    host_wait_.assign(static_cast<std::size_t>(batches), -1.0);
    window_spans_ = spans_;  // keep_spans between start and finish would find no marks
    if (window_spans_) host_marks_.assign(needed, {});
    batches_ = batches;
    c10::cuda::device_synchronize();
    const steady::time_point before = steady::now();
    TB_CUDA_CHECK(cudaEventRecord(origin_event_, compute()));
    if (window_spans_) origin_ = bracket(origin_event_, before);
    wall_start_ = steady::now();
  }

  void begin(stage_id s, int batch) override { mark(s, batch, 0); }
  void end(stage_id s, int batch) override { mark(s, batch, 1); }

  double finish_window(window_times& out) override {
    // cudaDeviceSynchronize waits for the current device only: make it the run's.
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::device_synchronize();
    const double wall = std::chrono::duration<double>(steady::now() - wall_start_).count();
    out.per_batch.assign(static_cast<std::size_t>(batches_), {});
    double copy_total = 0, copy_hidden = 0;
    std::vector<std::pair<double, double>> compute_spans, copy_spans;
    for (int b = 0; b < batches_; ++b) {
      auto& row = out.per_batch[static_cast<std::size_t>(b)];
      row.fill(-1.0);
      row[0] = host_wait_[static_cast<std::size_t>(b)];
      for (int s = 1; s < stage_count; ++s) {
        if (!recorded_[index(s, b, 0)] || !recorded_[index(s, b, 1)]) continue;
        // The duration from its own two events: a difference of two offsets from the window's
        // start would carry each offset's float rounding, which grows with the window's length.
        row[s] = between(index(s, b, 0), index(s, b, 1));
        if (s == static_cast<int>(stage_id::h2d)) {
          const double t0 = since_origin(index(s, b, 0));  // placement only, for the overlap
          copy_spans.push_back({t0, t0 + row[s]});
        }
      }
      // The step on the compute stream: forward..optimizer, or the graph's one `step`.
      int first = static_cast<int>(stage_id::forward), end_stage = static_cast<int>(stage_id::step);
      while (first < end_stage && !recorded_[index(first, b, 0)]) ++first;
      while (end_stage > first && !recorded_[index(end_stage, b, 1)]) --end_stage;
      if (recorded_[index(first, b, 0)] && recorded_[index(end_stage, b, 1)])
        compute_spans.push_back({since_origin(index(first, b, 0)), since_origin(index(end_stage, b, 1))});
    }
    out.overlap_share.reset();
    if (copy_ && !copy_spans.empty()) {
      for (const auto& c : copy_spans) {
        copy_total += c.second - c.first;
        for (const auto& k : compute_spans)
          copy_hidden += std::max(0.0, std::min(c.second, k.second) - std::max(c.first, k.first));
      }
      if (copy_total > 0) out.overlap_share = std::min(1.0, copy_hidden / copy_total);
    }
    out.spans.clear();
    if (window_spans_) {
      fit_drift();
      fill_spans(out.spans);
    }
    out.calibration_ns = window_spans_ ? map_.bound_ns : 0;
    return wall;
  }

  const char* kind() const override { return "CUDA events (data_wait: host steady clock)"; }

 private:
  cudaStream_t compute() const { return c10::cuda::getCurrentCUDAStream(device_.index()).stream(); }
  std::size_t index(int s, int b, int edge) const {
    return (static_cast<std::size_t>(b) * stage_count + static_cast<std::size_t>(s)) * 2 + edge;
  }
  double since_origin(std::size_t i) const { return since_origin(events_[i]); }
  double between(std::size_t begin, std::size_t end) const {
    float ms = 0;
    TB_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[begin], events_[end]));
    return ms / 1000.0;
  }
  double since_origin(cudaEvent_t e) const {
    float ms = 0;
    TB_CUDA_CHECK(cudaEventElapsedTime(&ms, origin_event_, e));
    return ms / 1000.0;
  }
  // The event's timestamp lies between the host times just before the record and just after it
  // completed, so the midpoint places it on the host clock to within half that bracket (narrow
  // because the device is idle). Outside the measured window.
  clock_point bracket(cudaEvent_t e, steady::time_point before) const {
    TB_CUDA_CHECK(cudaEventSynchronize(e));
    const steady::time_point after = steady::now();
    return {(ns(before) + ns(after)) / 2, (ns(after) - ns(before) + 1) / 2};
  }
  // A second bracketed event after the window's closing synchronisation: through both points the
  // two clocks' drift does not grow with the window's length (fit_clock says when it fits).
  void fit_drift() {
    const steady::time_point before = steady::now();
    TB_CUDA_CHECK(cudaEventRecord(closing_event_, compute()));
    const clock_point closing = bracket(closing_event_, before);
    map_ = fit_clock(origin_, closing, since_origin(closing_event_));
  }
  static std::int64_t ns(steady::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }

  // Device spans from the same events as the stage times, the data wait from the same host
  // reads, and the host's enqueue spans (not measurements) for the training thread's lane.
  void fill_spans(std::vector<stage_span>& out) const {
    out.reserve(static_cast<std::size_t>(batches_) * stage_count * 2);
    for (int b = 0; b < batches_; ++b) {
      const double wait = host_wait_[static_cast<std::size_t>(b)];
      if (wait >= 0) {
        const std::int64_t begin = ns(host_begin_[static_cast<std::size_t>(b)]);
        out.push_back({stage_id::data_wait, b, span_lane::host, true, begin, begin + std::llround(wait * 1e9)});
      }
      for (int s = 1; s < stage_count; ++s) {
        const std::size_t i0 = index(s, b, 0), i1 = index(s, b, 1);
        if (!recorded_[i0] || !recorded_[i1]) continue;
        const auto id = static_cast<stage_id>(s);
        const span_lane lane = (id == stage_id::h2d && copy_) ? span_lane::copy_stream : span_lane::compute_stream;
        const double t0 = since_origin(i0);  // placed from the window's start, as long as its own pair says
        out.push_back({id, b, lane, true, map_.to_host(t0), map_.to_host(t0 + between(i0, i1))});
        out.push_back({id, b, span_lane::host, false, ns(host_marks_[i0]), ns(host_marks_[i1])});
      }
    }
  }

  void mark(stage_id s, int batch, int edge) {
    TB_ASSERT(batch >= 0 && batch < batches_, "a stage marked outside the window's batches");
    if (s == stage_id::data_wait) {
      // Waiting for the loader is host time, not device time.
      auto& t = host_begin_[static_cast<std::size_t>(batch)];
      if (edge == 0)
        t = steady::now();
      else
        host_wait_[static_cast<std::size_t>(batch)] = std::chrono::duration<double>(steady::now() - t).count();
      return;
    }
    const std::size_t i = index(static_cast<int>(s), batch, edge);
    cudaStream_t stream = (s == stage_id::h2d && copy_) ? copy_->stream() : compute();
    if (window_spans_) host_marks_[i] = steady::now();
    TB_CUDA_CHECK(cudaEventRecord(events_[i], stream));
    recorded_[i] = true;
  }

  c10::Device device_;
  std::optional<c10::cuda::CUDAStream> copy_;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> recorded_;
  std::vector<steady::time_point> host_begin_;
  std::vector<double> host_wait_;
  std::vector<steady::time_point> host_marks_;  // keep_spans only: when each event was enqueued
  clock_point origin_;                          // keep_spans only: the window's first reference event on the host clock
  clock_map map_;                               // keep_spans only: device times onto the host clock, from both events
  cudaEvent_t origin_event_ = nullptr, closing_event_ = nullptr;
  int batches_ = 0;
  bool window_spans_ = false;  // keep_spans as it was when the window started
  steady::time_point wall_start_;
};

}  // namespace

std::unique_ptr<stage_clock> make_cuda_clock(c10::Device device, const transfer_stage* transfer) {
  std::optional<c10::cuda::CUDAStream> copy;
  if (auto* lane = dynamic_cast<const copy_lane*>(transfer)) copy = lane->stream();
  return std::make_unique<cuda_clock>(device, copy);
}

}  // namespace trainbench
