#include <chrono>
#include <cmath>

#include "trainbench/measure/clock.hpp"

namespace trainbench {

const char* stage_name(stage_id s) {
  static const char* names[stage_count] = {"data_wait", "h2d",       "preprocess", "forward", "backward",
                                           "allreduce", "optimizer", "step",       "batch"};
  return names[static_cast<int>(s)];
}

namespace {

using steady = std::chrono::steady_clock;

class host_clock final : public stage_clock {
 public:
  void start_window(int batches) override {
    begin_.assign(static_cast<std::size_t>(batches), {});
    times_.assign(static_cast<std::size_t>(batches), {});
    for (auto& row : times_) row.fill(-1.0);
    window_start_ = steady::now();
  }
  void begin(stage_id s, int batch) override { begin_[batch][static_cast<int>(s)] = steady::now(); }
  void end(stage_id s, int batch) override {
    const int k = static_cast<int>(s);
    times_[batch][k] = std::chrono::duration<double>(steady::now() - begin_[batch][k]).count();
  }
  double finish_window(window_times& out) override {
    const double elapsed = std::chrono::duration<double>(steady::now() - window_start_).count();
    out.per_batch = times_;
    out.overlap_share.reset();
    out.spans.clear();
    if (spans_) fill_spans(out.spans);
    return elapsed;
  }
  const char* kind() const override { return "host steady clock"; }

 private:
  // The stage times above, placed: end = begin + the same duration (exact to the nanosecond).
  void fill_spans(std::vector<stage_span>& out) const {
    out.reserve(times_.size() * stage_count);
    for (std::size_t b = 0; b < times_.size(); ++b) {
      for (int k = 0; k < stage_count; ++k) {
        const double t = times_[b][static_cast<std::size_t>(k)];
        if (t < 0) continue;
        stage_span s;
        s.stage = static_cast<stage_id>(k);
        s.row = static_cast<int>(b);
        s.begin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         begin_[b][static_cast<std::size_t>(k)].time_since_epoch())
                         .count();
        s.end_ns = s.begin_ns + std::llround(t * 1e9);
        out.push_back(s);
      }
    }
  }

  steady::time_point window_start_;
  std::vector<std::array<steady::time_point, stage_count>> begin_;
  std::vector<std::array<double, stage_count>> times_;
};

}  // namespace

std::unique_ptr<stage_clock> make_host_clock() { return std::make_unique<host_clock>(); }

}  // namespace trainbench
