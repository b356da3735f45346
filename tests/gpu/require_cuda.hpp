#pragma once
// The first line of every [gpu] case that needs a device: on a host without one the case fails
// with this message (the GPU kit's rehearsal expects it), never passes by doing nothing.
#include <torch/cuda.h>

#include <catch2/catch.hpp>

namespace tbgpu {

inline void require_cuda() {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
}

}  // namespace tbgpu
