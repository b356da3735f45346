#pragma once
// A c10d process group (TCPStore rendezvous, then ProcessGroupGloo or ProcessGroupNCCL) behind
// the few collectives a benchmark needs. c10d's types stay in the .cpp files of this folder.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/distributed/host_address.hpp"
#include "trainbench/distributed/launch.hpp"

namespace c10d {
class Work;
}

namespace trainbench {

struct process_group_state;  // c10d objects, see distributed/c10d_state.hpp
class peer_watch;

class process_group {
 public:
  // Joins the job: every rank must arrive within dist.timeout_s, or a run_error names the missing
  // ranks. Every rank learns every rank's host; on Gloo a heartbeat then watches them (peer_watch).
  process_group(const launch_info& launch, const dist_config& dist, c10::Device device);
  // After a failure, Gloo's threads may still wait on a lost peer until dist.timeout_s: the
  // backend is then left to the process's exit instead of joining them.
  ~process_group();
  process_group(const process_group&) = delete;
  process_group& operator=(const process_group&) = delete;

  int rank() const { return launch_.rank; }
  int world() const { return launch_.world; }
  const launch_info& launch() const { return launch_; }
  const std::string& backend_name() const { return backend_name_; }
  bool host_blocking() const { return backend_name_ == "gloo"; }  // wait() returns when the data is there
  // Every rank's host and Gloo address, by rank, as posted at the rendezvous.
  const std::vector<rank_host>& hosts() const { return hosts_; }

  void broadcast_from_rank0(std::vector<at::Tensor>& tensors);
  void barrier();
  // Every rank passes the same number of values; each rank gets all ranks' values, by rank.
  std::vector<std::vector<double>> all_gather(const std::vector<double>& mine);

  // Waits for a collective: at once where wait() does not block the host (NCCL); on Gloo in
  // slices of one heartbeat, giving up with a run_error as soon as the heartbeat has lost a peer.
  void wait(c10d::Work& work, const std::string& what);

  // Rethrows the exception in flight as a run_error that says what failed and which ranks
  // stopped answering.
  [[noreturn]] void fail(const std::string& what);

  process_group_state& state() { return *state_; }

 private:
  void rendezvous(std::chrono::milliseconds timeout, const rank_host& mine);
  std::string silent_ranks();
  std::string who() const;  // "rank 0 of 2 (host node7, 10.0.0.1)"
  launch_info launch_;
  std::string backend_name_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  std::vector<rank_host> hosts_;
  bool failed_ = false;
  std::unique_ptr<process_group_state> state_;
  std::unique_ptr<peer_watch> watch_;
};

// Whether this build can make the group (the Gloo headers were found at build time).
bool gloo_compiled_in();

}  // namespace trainbench
