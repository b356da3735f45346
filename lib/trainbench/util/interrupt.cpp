#include "trainbench/util/interrupt.hpp"

#include <csignal>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_signal(int) { g_interrupted = 1; }
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

bool interrupt_requested() noexcept { return g_interrupted != 0; }

void throw_if_interrupted() {
  if (interrupt_requested()) throw interrupted_error();
}

}  // namespace trainbench
