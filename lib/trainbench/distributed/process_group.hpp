#pragma once
// A c10d process group (TCPStore rendezvous, then ProcessGroupGloo or ProcessGroupNCCL) behind
// the few collectives a benchmark needs. c10d's types stay in the .cpp files of this folder.
#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/distributed/launch.hpp"

namespace trainbench {

struct process_group_state;  // c10d objects, see distributed/c10d_state.hpp

class process_group {
 public:
  // Joins the job: every rank must arrive within `timeout`, or a run_error names the missing ranks.
  process_group(const launch_info& launch, dist_backend backend, c10::Device device, std::chrono::milliseconds timeout);
  ~process_group();
  process_group(const process_group&) = delete;
  process_group& operator=(const process_group&) = delete;

  int rank() const { return launch_.rank; }
  int world() const { return launch_.world; }
  const launch_info& launch() const { return launch_; }
  const std::string& backend_name() const { return backend_name_; }
  bool host_blocking() const { return backend_name_ == "gloo"; }  // wait() returns when the data is there

  void broadcast_from_rank0(std::vector<at::Tensor>& tensors);
  void barrier();
  // Every rank passes the same number of values; each rank gets all ranks' values, by rank.
  std::vector<std::vector<double>> all_gather(const std::vector<double>& mine);

  // Rethrows the exception in flight as a run_error that says what failed and which ranks
  // stopped answering.
  [[noreturn]] void fail(const std::string& what);

  process_group_state& state() { return *state_; }

 private:
  void rendezvous(std::chrono::milliseconds timeout);
  std::string silent_ranks();
  launch_info launch_;
  std::string backend_name_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<process_group_state> state_;
};

// Whether this build can make the group (the Gloo headers were found at build time).
bool gloo_compiled_in();

}  // namespace trainbench
