#include <chrono>

#include "trainbench/measure/clock.hpp"

namespace trainbench {

const char* stage_name(stage_id s) {
  static const char* names[stage_count] = {"data_wait", "h2d",       "preprocess", "forward",
                                           "backward",  "allreduce",  "optimizer", "batch"};
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
    return elapsed;
  }
  const char* kind() const override { return "host steady clock"; }

 private:
  steady::time_point window_start_;
  std::vector<std::array<steady::time_point, stage_count>> begin_;
  std::vector<std::array<double, stage_count>> times_;
};

}  // namespace

std::unique_ptr<stage_clock> make_host_clock() { return std::make_unique<host_clock>(); }

}  // namespace trainbench
