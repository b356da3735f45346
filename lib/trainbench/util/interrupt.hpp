#pragma once
// Ctrl-C handling: the handler only sets a flag; the runner polls it between batches and
// unwinds with interrupted_error, so every RAII guard (threads, graph capture) runs.
namespace trainbench {

void install_interrupt_handler();
bool interrupt_requested() noexcept;
void throw_if_interrupted();

}  // namespace trainbench
