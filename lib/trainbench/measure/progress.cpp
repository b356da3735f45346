#include "trainbench/measure/progress.hpp"

#include <chrono>
#include <cstdio>

namespace trainbench {

progress_line::progress_line(bool tty, seconds_fn now) : tty_(tty), now_(std::move(now)) {
  if (!now_)
    now_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
}

std::string progress_line::update(const std::string& phase, std::int64_t done, std::int64_t total,
                                  double last_window_rate) {
  const double now = now_();
  const double interval = tty_ ? 0.25 : 5.0;
  if (phase != phase_) {
    phase_ = phase;
    phase_start_ = now;
    last_shown_ = now - interval;  // the phase's first batch shows at once on a terminal
    if (!tty_) last_shown_ = now;
  }
  const bool last = done >= total;
  if (!last && now - last_shown_ < interval) return "";
  last_shown_ = now;
  if (tty_) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "\r%-78s", text(done, total, last_window_rate, now).c_str());
    return std::string(buf) + (last ? "\n" : "");
  }
  if (last) return phase_ + ": " + std::to_string(total) + " batches done";
  return text(done, total, last_window_rate, now);
}

std::string progress_line::text(std::int64_t done, std::int64_t total, double rate, double now) const {
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "%s: batch %lld/%lld", phase_.c_str(), static_cast<long long>(done),
                        static_cast<long long>(total));
  if (rate > 0) n += std::snprintf(buf + n, sizeof buf - n, ", %.1f samples/s (last window)", rate);
  const double elapsed = now - phase_start_;
  if (done > 0 && done < total && elapsed > 0) {
    const double left = elapsed / static_cast<double>(done) * static_cast<double>(total - done);
    std::snprintf(buf + n, sizeof buf - n, ", about %.0f s left", left);
  }
  return buf;
}

}  // namespace trainbench
