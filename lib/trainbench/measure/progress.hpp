#pragma once
// The live progress line (no torch here): batches done, samples/s of the last finished window,
// and the time left, from host-side counts and the host clock only, so nothing it shows needs
// the device inside a window.
#include <cstdint>
#include <functional>
#include <string>

namespace trainbench {

class progress_line {
 public:
  using seconds_fn = std::function<double()>;  // a monotonic clock; steady_clock by default
  // tty: redrawn in place up to four times a second; otherwise a plain line every 5 seconds.
  explicit progress_line(bool tty, seconds_fn now = {});

  // What to print after this batch ("" for nothing): on a terminal the line starts with '\r'
  // and the phase's last batch ends it with '\n'; otherwise one log line, and one at the end of
  // each phase ("warmup: 5 batches done").
  std::string update(const std::string& phase, std::int64_t done, std::int64_t total, double last_window_rate);

 private:
  std::string text(std::int64_t done, std::int64_t total, double rate, double now) const;
  bool tty_;
  seconds_fn now_;
  std::string phase_;
  double phase_start_ = 0, last_shown_ = 0;
};

}  // namespace trainbench
