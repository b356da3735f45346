#pragma once
// For [gpu] tests that compare two ways of computing the same training steps (a CUDA graph and
// its eager twin): without this, what they compare is whatever the process's earlier tests left
// in the global context, and by LibTorch's defaults convolutions run in TF32 (a 10-bit mantissa)
// with cuDNN free to pick nondeterministic algorithms (atomics in weight gradients). Two runs of
// the same eager step then differ by far more than float32 rounding, and a few SGD steps
// amplify it. The guard sets either exact math (deterministic cuDNN algorithms, no autotuning,
// no TF32) or LibTorch's defaults (TF32 convolutions, any algorithm), and restores the previous
// settings on exit.
#include <ATen/Context.h>

namespace tbgpu {

enum class cuda_math { exact, libtorch_defaults };

class cuda_math_guard {
 public:
  explicit cuda_math_guard(cuda_math math = cuda_math::exact)
      : deterministic_(at::globalContext().deterministicCuDNN()),
        benchmark_(at::globalContext().benchmarkCuDNN()),
        tf32_cudnn_(at::globalContext().allowTF32CuDNN()),
        tf32_cublas_(at::globalContext().allowTF32CuBLAS()) {
    // The legacy setters only, as the pipeline uses: mixing them with the newer precision API
    // makes the getters throw.
    const bool exact = math == cuda_math::exact;
    at::globalContext().setDeterministicCuDNN(exact);
    at::globalContext().setBenchmarkCuDNN(false);
    at::globalContext().setAllowTF32CuDNN(!exact);  // LibTorch's default: true
    at::globalContext().setAllowTF32CuBLAS(false);  // LibTorch's default: false
  }
  ~cuda_math_guard() {
    at::globalContext().setDeterministicCuDNN(deterministic_);
    at::globalContext().setBenchmarkCuDNN(benchmark_);
    at::globalContext().setAllowTF32CuDNN(tf32_cudnn_);
    at::globalContext().setAllowTF32CuBLAS(tf32_cublas_);
  }
  cuda_math_guard(const cuda_math_guard&) = delete;
  cuda_math_guard& operator=(const cuda_math_guard&) = delete;

 private:
  bool deterministic_, benchmark_, tf32_cudnn_, tf32_cublas_;
};

}  // namespace tbgpu
