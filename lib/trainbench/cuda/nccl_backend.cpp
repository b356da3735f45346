// ProcessGroupNCCL for data-parallel runs on CUDA. Compiled against the nccl.h of the wheel's
// own NCCL package (found by CMake), since ProcessGroupNCCL::Options holds an ncclConfig_t by value.
#include <c10/cuda/CUDAFunctions.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "trainbench/distributed/c10d_state.hpp"

namespace trainbench {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    c10::Device device, std::chrono::milliseconds timeout) {
  // A hung collective must end in an exception the run can report, not in the watchdog ending
  // the process: "clean up only" aborts the communicator and lets the next collective throw.
  // (Blocking wait would do it too, but it makes every all-reduce a host sync, which changes
  // what is measured.) The user's own setting wins.
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, options);
  // Tell NCCL which GPU this rank drives before the first collective (it would guess from the rank).
  group->setBoundDeviceId(device);
  return group;
}

}  // namespace trainbench
