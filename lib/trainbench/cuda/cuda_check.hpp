#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "trainbench/util/error.hpp"

// Throws with the call and its location; TB_CUDA_WARN is the noexcept variant for destructors.
#define TB_CUDA_CHECK(call)                                                                                     \
  do {                                                                                                          \
    cudaError_t tb_err_ = (call);                                                                               \
    if (tb_err_ != cudaSuccess)                                                                                 \
      throw ::trainbench::run_error("cuda", std::string(#call) + " failed at " + __FILE__ + ":" +               \
                                                std::to_string(__LINE__) + ": " + cudaGetErrorString(tb_err_)); \
  } while (0)

#define TB_CUDA_WARN(call) (void)(call)
