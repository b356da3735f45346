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

// How one rank's run ended, as every rank hands it in at the end: whether it failed and why, and
// its measurements (rank_merge.hpp's pack_rank; ranks may have measured different numbers of
// windows when one failed).
struct rank_outcome {
  bool failed = false;
  std::string error;
  std::vector<double> packed;
};

class process_group {
 public:
  // Joins the job: every rank must arrive within dist.timeout_s, or a run_error names the missing
  // ranks. Every rank learns every rank's host; on Gloo a heartbeat then watches them (peer_watch).
  process_group(const launch_info& launch, const dist_config& dist, c10::Device device);
  // Shuts the backend down (shutdown()) unless that was done. After a failure, Gloo's threads
  // may still wait on a lost peer until dist.timeout_s: that backend is then left to the
  // process's exit instead of joining them.
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
  // Both wait on the host, on every backend, at most dist.timeout_s (a run_error after it).
  void barrier();
  // Every rank passes the same number of values; each rank gets all ranks' values, by rank.
  std::vector<std::vector<double>> all_gather(const std::vector<double>& mine);

  // The end of a run, failed or not: every rank posts its outcome in the store (no collective,
  // so a rank that failed between two collectives still meets the others) and, unless
  // `wait_for_others` is false, reads every rank's, by rank. Bounded by dist.timeout_s and the
  // heartbeat; a run_error names the ranks that never handed theirs in.
  std::vector<rank_outcome> exchange_outcomes(const rank_outcome& mine, bool wait_for_others);
  // Whether this rank's collectives still work: false once one failed or was abandoned (its
  // outcome can then still be posted, but is not waited for: the others may be gone).
  bool links_intact() const { return !failed_; }

  // Waits for a collective. `on_host`: the host waits for the data (a barrier, a gather), bounded
  // by dist.timeout_s on every backend; else at once where wait() does not block the host (NCCL's
  // hot path). Waits that block the host do it in slices, and between slices end with
  // interrupted_error on SIGINT/SIGTERM and with a run_error as soon as the heartbeat has lost a
  // peer or another rank has posted its failure.
  void wait(c10d::Work& work, const std::string& what, bool on_host = false);

  // Rethrows the exception in flight as a run_error that says what failed and which ranks
  // stopped answering.
  [[noreturn]] void fail(const std::string& what);

  // The end of the group, as torch.distributed.destroy_process_group(): NCCL finishes its
  // collectives and destroys its communicators (aborts them after a failure). Once only; the
  // collectives above refuse to run after it (a run_error).
  void shutdown();
  bool shut_down() const { return shut_down_; }

  process_group_state& state() { return *state_; }

 private:
  void rendezvous(std::chrono::milliseconds timeout, const rank_host& mine);
  void check_open(const std::string& what) const;
  // Checks, between two slices of a wait: a signal, a lost peer, a peer's posted failure.
  void check_between_slices(const std::string& what);
  [[noreturn]] void abandon(const std::string& what, const std::string& why, bool lost);
  void post_failure(const std::string& message);
  std::string failed_peers();  // "rank 2 (host ...) failed: ..." for each rank that posted a failure
  std::string silent_ranks();
  std::string who() const;  // "rank 0 of 2 (host node7, 10.0.0.1)"
  launch_info launch_;
  std::string backend_name_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  std::vector<rank_host> hosts_;
  bool failed_ = false;  // a collective of the backend was left unfinished
  bool store_lost_ = false;  // the store is gone, or its link (the main thread leaves it alone)
  bool posted_failure_ = false;
  bool shut_down_ = false;
  std::unique_ptr<process_group_state> state_;
  std::unique_ptr<peer_watch> watch_;
};

// Whether this build can make the group (the Gloo headers were found at build time).
bool gloo_compiled_in();

}  // namespace trainbench
