#include "trainbench/util/interrupt.hpp"

#include <atomic>
#include <csignal>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {
// The handler runs on whichever thread receives the signal (loader, OpenMP and Gloo threads do
// not block it) and the main thread reads the flag: a lock-free atomic is the one type both
// signal-safe and race-free across threads (a volatile sig_atomic_t is only the former).
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the interrupt flag must be lock-free to be set in a handler");
// The first signal asks the run to stop where it can still write its report; the default action
// comes back for the second, so a second Ctrl-C (or torchrun's SIGTERM, then its SIGKILL) ends a
// process that cannot stop in time at once. signal() is async-signal-safe.
extern "C" void on_signal(int) {
  g_interrupted.store(true, std::memory_order_relaxed);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

void ignore_broken_pipes() { std::signal(SIGPIPE, SIG_IGN); }

bool interrupt_requested() noexcept { return g_interrupted.load(std::memory_order_relaxed); }

void throw_if_interrupted() {
  if (interrupt_requested()) throw interrupted_error();
}

}  // namespace trainbench
