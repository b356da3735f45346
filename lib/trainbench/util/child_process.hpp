#pragma once
// Start this executable again as a child and wait for it, passing Ctrl-C on (no torch here).
#include <csignal>
#include <string>
#include <vector>

namespace trainbench {

// The running executable's path (/proc/self/exe), for messages and a child's argv[0].
std::string self_executable();

// While it lives, SIGINT, SIGTERM and SIGCHLD wait for run_self and interrupt_pending instead
// of running a handler. Make it before starting threads: they inherit the mask, so no signal
// lands in a thread that does not look for it.
class held_signals {
 public:
  held_signals();
  ~held_signals();
  held_signals(const held_signals&) = delete;
  held_signals& operator=(const held_signals&) = delete;
  const sigset_t& set() const { return set_; }
  const sigset_t& saved() const { return saved_; }

 private:
  sigset_t set_, saved_;
};

// Whether a SIGINT or SIGTERM arrived (and takes it): between children, where nothing waits.
bool interrupt_pending(const held_signals& held);

struct child_exit {
  int code = 0;              // the child's exit code; 128 + signal when a signal ended it
  int signal = 0;            // the signal that ended it; 0 when it exited
  bool interrupted = false;  // SIGINT or SIGTERM reached this process while the child ran
};

// Runs this very executable again with argv (argv[0] is only the name the child sees), sharing
// stdout, stderr and the environment, and waits. It execs /proc/self/exe, the file this process
// started from, so a rebuild that replaces or deletes the binary meanwhile neither breaks the
// children nor mixes two builds in one ladder.
// A SIGINT or SIGTERM sent to this process alone is forwarded to the child, so the child
// writes its interrupted report either way (a terminal's Ctrl-C reaches both already).
child_exit run_self(const std::vector<std::string>& argv, const held_signals& held);

}  // namespace trainbench
