#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <thread>

#include "trainbench/util/error.hpp"
#include "trainbench/util/interrupt.hpp"

using namespace trainbench;

// Ctrl-C is delivered to whichever thread does not block it: often a loader or OpenMP thread.
// The flag it sets must reach the main thread's check (an atomic: a thread sanitizer reports the
// volatile sig_atomic_t it replaced as a data race). In a child process: the flag stays set.
TEST_CASE("SIGINT caught on another thread interrupts the main thread's run") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    install_interrupt_handler();
    if (interrupt_requested()) _exit(3);
    // The main thread polls while the other thread takes the signal (no join in between: that
    // is what a run does, and what a thread sanitizer checks).
    std::atomic<bool> raised{false};
    std::thread other([&raised] {
      pthread_kill(pthread_self(), SIGINT);  // the handler runs on this thread before this returns
      raised.store(true, std::memory_order_release);
    });
    while (!interrupt_requested() && !raised.load(std::memory_order_acquire)) {
    }
    other.join();
    try {
      throw_if_interrupted();
    } catch (const interrupted_error&) {
      _exit(0);
    }
    _exit(1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// The first signal asks the run to stop where it can still write its report; a second one must
// end a process that cannot get there (blocked on a lost peer, say) at once, as without a handler.
TEST_CASE("a second SIGINT or SIGTERM ends the process at once") {
  for (const int sig : {SIGINT, SIGTERM}) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      install_interrupt_handler();
      raise(sig);
      if (!interrupt_requested()) _exit(3);
      raise(sig);
      _exit(0);  // reached only if the second signal was caught too
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
  }
}
