// The GPU kit runs the [gpu] cases in group processes: what one case leaves in PyTorch's caching
// allocator and cuBLAS's per-stream workspaces would otherwise stay held in that process, and a
// later case (a batch-size search, a ladder of child processes) would find less of the GPU than
// when it runs alone. After each case, once its work is done, they are freed.
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>

// Catch2 2's listener base is among its external interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <exception>

namespace {

struct free_cuda_caches : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats&) override {
    if (!torch::cuda::is_available()) return;
    try {
      c10::cuda::device_synchronize();
      at::cuda::clearCublasWorkspaces();
      c10::cuda::CUDACachingAllocator::emptyCache();
    } catch (const std::exception&) {
      // A device error the case left behind is that case's failure, already reported; the cases
      // after it meet it themselves.
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(free_cuda_caches)
