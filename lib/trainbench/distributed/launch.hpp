#pragma once
// Where this process sits in a data-parallel job, read from the launcher's environment
// (torchrun, Slurm's srun, or nothing). No torch here: it is plain parsing, tested on its own.
#include <functional>
#include <optional>
#include <string>

namespace trainbench {

struct launch_info {
  std::string launcher = "none";  // none | torchrun | slurm
  int rank = 0, world = 1;
  int local_rank = 0, local_world = 1;
  std::string master_addr;  // rendezvous host (the TCPStore)
  int master_port = 0;
  bool agent_store = false;   // torchrun's agent already serves the store: every rank is a client
  // torchrun's TORCHELASTIC_RESTART_COUNT. Not an attempt's key: after a restart it differs
  // between nodes (see connect_store in process_group.cpp).
  std::string restart_count;
  // Set by a ladder for each run it starts: the store outlives the run (the ladder's rank 0 or
  // torchrun's agent serves it), and this run's keys live under this prefix.
  std::string store_prefix;
};

// The environment variable that carries launch_info::store_prefix from a ladder to its runs.
constexpr const char* ladder_store_variable = "TRAINBENCH_STORE_PREFIX";

// Reads one environment variable; std::nullopt when unset.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;
env_lookup process_environment();

// torchrun's variables win over Slurm's (torchrun inside an srun allocation is common).
// Bad or inconsistent values throw config_error naming the variable.
launch_info read_launch(const env_lookup& env);

// The first host of a Slurm node list: "gpu[07-09,12],cpu1" -> "gpu07".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace trainbench
