#pragma once
// Under torchrun or srun a ladder starts one run per rung and round on every rank; those runs
// rendezvous through a store that outlives each of them (no torch here; c10d in the .cpp).
#include <memory>

#include "trainbench/distributed/launch.hpp"

namespace trainbench {

class ladder_store {
 public:
  // On rank 0, serves the store at MASTER_ADDR:MASTER_PORT for the ladder's lifetime, unless
  // torchrun's agent serves one already; nothing on other ranks or without a launcher.
  explicit ladder_store(const launch_info& launch);
  ~ladder_store();
  ladder_store(const ladder_store&) = delete;
  ladder_store& operator=(const ladder_store&) = delete;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace trainbench
