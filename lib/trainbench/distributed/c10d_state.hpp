#pragma once
// c10d's objects, for the .cpp files of distributed/ only (the c10d headers are heavy).
#include <chrono>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "trainbench/distributed/host_address.hpp"
#include "trainbench/distributed/launch.hpp"

namespace trainbench {

struct process_group_state {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
};

// The rendezvous store at MASTER_ADDR:MASTER_PORT: served here on rank 0 (unless torchrun's
// agent serves it, or the store outlives this run), else connected to. run_error when it cannot.
c10::intrusive_ptr<c10d::Store> open_tcp_store(const launch_info& l, std::chrono::milliseconds timeout);
// A c10d error's message without its C++ stack trace.
std::string store_error_text(const std::exception& e);

// Runs `op` (calls on a store) on a thread of its own and waits for it at most `limit`: true
// when it returned (rethrowing what it threw), false while it is still blocked. A store call
// over a link that went down does not return until the kernel gives up on the connection (about
// 15 minutes), and after c10d's wait() times out it reads the cancel reply with no timeout at all;
// a call left blocked here runs on in the background until the process exits. `op` must hold by
// value everything it uses.
bool call_within(std::function<void()> op, std::chrono::milliseconds limit);

enum class key_wait { ready, timed_out, unreachable };
// Waits until every key exists, by asking the store whether they do (never c10d's wait(), for
// the reason above), until `deadline`; each question bounded by `call_limit` (unreachable when
// one is not answered in time). `between` runs between questions (a signal, a heartbeat's
// verdict: it throws to stop the wait).
key_wait wait_for_keys(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<std::string>& keys,
                       std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds call_limit,
                       const std::function<void()>& between = {});

// Built in their own translation units: gloo_backend.cpp needs the Gloo headers, the NCCL one
// (cuda/nccl_backend.cpp) the CUDA and NCCL headers.
// Gloo gets one device per address of `devices` (by interface name where GLOO_SOCKET_IFNAME gave one).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, const gloo_choice& devices);
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    c10::Device device, std::chrono::milliseconds timeout);

}  // namespace trainbench
