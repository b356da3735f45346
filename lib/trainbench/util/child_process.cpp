#include "trainbench/util/child_process.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "trainbench/util/error.hpp"

extern char** environ;

namespace trainbench {

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw run_error("runtime", "cannot find this executable (/proc/self/exe): " + ec.message());
  // A rebuilt binary leaves "<path> (deleted)" behind; the name is still the one the user ran.
  const std::string deleted = " (deleted)";
  std::string name = path.string();
  if (name.size() > deleted.size() && name.compare(name.size() - deleted.size(), deleted.size(), deleted) == 0)
    name.resize(name.size() - deleted.size());
  return name;
}

held_signals::held_signals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set_, &saved_);
}

held_signals::~held_signals() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

bool interrupt_pending(const held_signals&) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  const timespec now{0, 0};
  return sigtimedwait(&stop, nullptr, &now) > 0;
}

namespace {

int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// The child starts with the mask as it was before holding, and default SIGINT / SIGTERM
// actions, so its own handler sees Ctrl-C.
pid_t spawn(const std::vector<std::string>& argv, const held_signals& held) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &held.saved());
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  // In the child, /proc/self/exe is still this process's executable (posix_spawn has not exec'd yet).
  const int err = posix_spawn(&pid, "/proc/self/exe", nullptr, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (err != 0) throw run_error("runtime", "cannot start '" + argv[0] + "': " + std::strerror(err));
  return pid;
}

}  // namespace

child_exit run_self(const std::vector<std::string>& argv, const held_signals& held) {
  TB_ASSERT(!argv.empty(), "run_self needs argv[0]");
  const pid_t pid = spawn(argv, held);
  child_exit out;
  for (;;) {
    // Checked before waiting too: a SIGCHLD taken by an earlier call may have been this child's.
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      out.code = exit_code_of(status);
      if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
      return out;
    }
    const int sig = sigwaitinfo(&held.set(), nullptr);
    if (sig < 0 && errno != EINTR)
      throw run_error("runtime", std::string("waiting for a child process: ") + std::strerror(errno));
    if (sig == SIGINT || sig == SIGTERM) {
      out.interrupted = true;
      kill(pid, sig);
    }
  }
}

}  // namespace trainbench
