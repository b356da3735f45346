#pragma once
// Which host a rank runs on and which address its Gloo traffic leaves from (no torch here: plain
// POSIX name and interface lookups, tested on their own).
#include <string>
#include <vector>

#include "trainbench/distributed/launch.hpp"
#include "trainbench/report/run_result.hpp"  // rank_host

namespace trainbench {

// Gloo's devices for this process: one per interface of GLOO_SOCKET_IFNAME (comma-separated),
// else one on the first address the host name resolves to that can be bound here, else loopback.
// That is torch.distributed's rule; choosing here lets the report say which address it was.
struct gloo_choice {
  std::vector<std::string> interfaces;  // GLOO_SOCKET_IFNAME's, in order; empty: by host name
  std::vector<std::string> addresses;   // one per device
  std::string how;                      // "interface eth0", "host name node7", "loopback: ..."
};
gloo_choice choose_gloo_devices(const env_lookup& env);

std::string this_host_name();
bool is_loopback(const std::string& address);

// "rank 1 (host node7, 10.0.0.2)"; without hosts (before the rendezvous), "rank 1".
std::string rank_at(int rank, const std::vector<rank_host>& hosts);

// Host records travel through the store as "host address".
std::string host_record(const rank_host& h);
rank_host parse_host_record(const std::string& text);

// Throws config_error naming GLOO_SOCKET_IFNAME when the job spans hosts but a rank would carry
// Gloo over loopback, or ranks on different hosts would use the same address: their peers would
// then connect to themselves and wait until dist.timeout_s.
void check_gloo_addresses(const std::vector<rank_host>& hosts);

}  // namespace trainbench
