#include "trainbench/distributed/launch.hpp"

#include <cstdlib>

#include "trainbench/util/error.hpp"

namespace trainbench {

env_lookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

namespace {

int env_int(const env_lookup& env, const std::string& name, int min_value) {
  const std::string text = *env(name);
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < min_value)
    throw config_error("environment", name,
                       "'" + text + "' is not an integer >= " + std::to_string(min_value));
  return value;
}

int optional_int(const env_lookup& env, const std::string& name, int fallback, int min_value) {
  return env(name) ? env_int(env, name, min_value) : fallback;
}

void check_ranks(const launch_info& l, const std::string& rank_var, const std::string& local_var) {
  if (l.rank >= l.world)
    throw config_error("environment", rank_var,
                       std::to_string(l.rank) + " is not below the world size " + std::to_string(l.world));
  if (l.local_rank >= l.local_world || l.local_world > l.world)
    throw config_error("environment", local_var,
                       std::to_string(l.local_rank) + " does not fit " + std::to_string(l.local_world) +
                           " processes on this node (world size " + std::to_string(l.world) + ")");
}

void read_master(const env_lookup& env, launch_info& l, const std::string& default_addr) {
  l.master_addr = env("MASTER_ADDR").value_or(default_addr);
  if (l.master_addr.empty())
    throw config_error("environment", "MASTER_ADDR", "not set: the rendezvous host is unknown");
  l.master_port = optional_int(env, "MASTER_PORT", 29500, 1);
  if (l.master_port > 65535)
    throw config_error("environment", "MASTER_PORT", std::to_string(l.master_port) + " is not a TCP port");
}

launch_info from_torchrun(const env_lookup& env) {
  launch_info l;
  l.launcher = "torchrun";
  if (!env("WORLD_SIZE")) throw config_error("environment", "WORLD_SIZE", "not set, but RANK is");
  l.rank = env_int(env, "RANK", 0);
  l.world = env_int(env, "WORLD_SIZE", 1);
  l.local_rank = optional_int(env, "LOCAL_RANK", l.rank, 0);
  l.local_world = optional_int(env, "LOCAL_WORLD_SIZE", l.world, 1);
  check_ranks(l, "RANK", "LOCAL_RANK");
  read_master(env, l, "");
  const std::string agent = env("TORCHELASTIC_USE_AGENT_STORE").value_or("False");
  l.agent_store = agent == "True" || agent == "true" || agent == "1";
  l.restart_count = env("TORCHELASTIC_RESTART_COUNT").value_or("0");
  return l;
}

launch_info from_slurm(const env_lookup& env) {
  launch_info l;
  l.launcher = "slurm";
  l.rank = env_int(env, "SLURM_PROCID", 0);
  l.world = optional_int(env, "SLURM_NTASKS", 1, 1);
  l.local_rank = optional_int(env, "SLURM_LOCALID", 0, 0);
  // SLURM_NTASKS_PER_NODE may read "4(x2)"; the job step's per-node count is unambiguous.
  l.local_world = optional_int(env, "SLURM_STEP_NUM_TASKS", l.world, 1) /
                  std::max(1, optional_int(env, "SLURM_STEP_NUM_NODES", 1, 1));
  l.local_world = std::max(l.local_world, l.local_rank + 1);
  check_ranks(l, "SLURM_PROCID", "SLURM_LOCALID");
  const std::string nodes = env("SLURM_STEP_NODELIST").value_or(env("SLURM_JOB_NODELIST").value_or(""));
  read_master(env, l, nodes.empty() ? std::string() : first_slurm_host(nodes));
  return l;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  const std::size_t comma = nodelist.find(',');
  const std::size_t bracket = nodelist.find('[');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket))
    return nodelist.substr(0, comma);
  // prefix[07-09,12]: the first number of the first range, zero padding kept.
  const std::size_t end = nodelist.find_first_of("-,]", bracket + 1);
  if (end == std::string::npos)
    throw config_error("environment", "SLURM_JOB_NODELIST", "cannot read node list '" + nodelist + "'");
  return nodelist.substr(0, bracket) + nodelist.substr(bracket + 1, end - bracket - 1);
}

launch_info read_launch(const env_lookup& env) {
  launch_info l;
  if (env("RANK"))
    l = from_torchrun(env);
  else if (env("SLURM_PROCID") && env("SLURM_NTASKS"))
    l = from_slurm(env);
  if (l.launcher != "none") l.store_prefix = env(ladder_store_variable).value_or("");
  return l;
}

}  // namespace trainbench
