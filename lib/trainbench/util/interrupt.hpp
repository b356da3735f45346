#pragma once
// Ctrl-C handling: the handler only sets a flag; the runner polls it between batches, and waits
// on other ranks (distributed/process_group.cpp) between slices, and unwinds with
// interrupted_error, so every RAII guard (threads, graph capture) runs. A second SIGINT or SIGTERM
// gets the default action: the process ends at once.
namespace trainbench {

void install_interrupt_handler();
bool interrupt_requested() noexcept;
void throw_if_interrupted();

}  // namespace trainbench
