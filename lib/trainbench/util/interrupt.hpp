#pragma once
// Ctrl-C handling: the handler only sets a flag; the runner polls it between batches, and waits
// on other ranks (distributed/process_group.cpp) between slices, and unwinds with
// interrupted_error, so every RAII guard (threads, graph capture) runs. A second SIGINT or SIGTERM
// gets the default action: the process ends at once.
namespace trainbench {

void install_interrupt_handler();
// A write to a socket or pipe whose reader is gone returns EPIPE instead of killing the process
// with SIGPIPE: a peer rank that dies mid-write (Gloo, the c10d store) must leave this rank able to
// fail with an error and a report, as under Python, which ignores SIGPIPE from startup. Once, at
// the start of main().
void ignore_broken_pipes();
bool interrupt_requested() noexcept;
void throw_if_interrupted();

}  // namespace trainbench
