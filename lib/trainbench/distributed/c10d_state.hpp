#pragma once
// c10d's objects, for the .cpp files of distributed/ only (the c10d headers are heavy).
#include <chrono>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "trainbench/distributed/host_address.hpp"

namespace trainbench {

struct process_group_state {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
};

// Built in their own translation units: gloo_backend.cpp needs the Gloo headers, the NCCL one
// (cuda/nccl_backend.cpp) the CUDA and NCCL headers.
// Gloo gets one device per address of `devices` (by interface name where GLOO_SOCKET_IFNAME gave one).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, const gloo_choice& devices);
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    c10::Device device, std::chrono::milliseconds timeout);

}  // namespace trainbench
