// See dbn_apply.hpp. Memory-bound: each thread moves 16 bytes of dz, x and dx at a time where the
// tensors allow it (every ResNet channel count does), one element at a time otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "trainbench/cuda/cuda_check.hpp"
#include "trainbench/cuda/dbn_apply.hpp"

namespace trainbench {

namespace {

template <class T>
__device__ float to_float(T v) {
  return static_cast<float>(v);
}
template <>
__device__ float to_float(__half v) {
  return __half2float(v);
}
template <>
__device__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class T>
__device__ T from_float(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __half from_float(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 from_float(float v) {
  return __float2bfloat16_rn(v);
}

template <class T>
__device__ T apply(T dz, T x, std::int64_t c, const float* eq_dy, const float* eq_x, const float* eq_b) {
  return from_float<T>(fmaf(eq_dy[c], to_float(dz), fmaf(eq_x[c], to_float(x), eq_b[c])));
}

template <class T>
__global__ void dbn_apply_scalar(const T* dz, const T* x, const float* eq_dy, const float* eq_x, const float* eq_b,
                                 T* dx, std::int64_t numel, std::int64_t channels) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += step)
    dx[i] = apply(dz[i], x[i], i % channels, eq_dy, eq_x, eq_b);
}

// Vectors of 16 bytes, loaded and stored whole; channels is a multiple of a vector's elements, so a
// vector never straddles two pixels' channel ranges.
template <class T>
struct alignas(16) vector16 {
  T v[16 / sizeof(T)];
};

template <class T>
__global__ void dbn_apply_vector(const vector16<T>* dz, const vector16<T>* x, const float* eq_dy, const float* eq_x,
                                 const float* eq_b, vector16<T>* dx, std::int64_t vectors, std::int64_t channels) {
  constexpr int per = 16 / sizeof(T);
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += step) {
    const vector16<T> a = dz[v], b = x[v];
    vector16<T> out;
    const std::int64_t c0 = (v * per) % channels;
#pragma unroll
    for (int j = 0; j < per; ++j) out.v[j] = apply(a.v[j], b.v[j], c0 + j, eq_dy, eq_x, eq_b);
    dx[v] = out;
  }
}

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T>
void launch(const void* dz, const void* x, const float* eq_dy, const float* eq_x, const float* eq_b, void* dx,
            std::int64_t numel, std::int64_t channels, cudaStream_t stream) {
  constexpr int threads = 256;
  constexpr std::int64_t per = 16 / sizeof(T);
  const auto blocks = [](std::int64_t work) {
    // Enough blocks to fill any current GPU several times over; the loops stride over the rest.
    const std::int64_t b = (work + threads - 1) / threads;
    return static_cast<unsigned>(b < 8192 ? (b > 0 ? b : 1) : 8192);
  };
  if (channels % per == 0 && aligned(dz) && aligned(x) && aligned(dx)) {
    const std::int64_t vectors = numel / per;
    dbn_apply_vector<T><<<blocks(vectors), threads, 0, stream>>>(
        static_cast<const vector16<T>*>(dz), static_cast<const vector16<T>*>(x), eq_dy, eq_x, eq_b,
        static_cast<vector16<T>*>(dx), vectors, channels);
  } else {
    dbn_apply_scalar<T><<<blocks(numel), threads, 0, stream>>>(static_cast<const T*>(dz), static_cast<const T*>(x),
                                                                eq_dy, eq_x, eq_b, static_cast<T*>(dx), numel,
                                                                channels);
  }
  TB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_dbn_apply(dbn_apply_type type, const void* dz, const void* x, const float* eq_dy, const float* eq_x,
                      const float* eq_b, void* dx, std::int64_t numel, std::int64_t channels, CUstream_st* stream) {
  if (numel == 0) return;
  switch (type) {
    case dbn_apply_type::f16:
      return launch<__half>(dz, x, eq_dy, eq_x, eq_b, dx, numel, channels, stream);
    case dbn_apply_type::bf16:
      return launch<__nv_bfloat16>(dz, x, eq_dy, eq_x, eq_b, dx, numel, channels, stream);
    case dbn_apply_type::f32:
      return launch<float>(dz, x, eq_dy, eq_x, eq_b, dx, numel, channels, stream);
  }
}

}  // namespace trainbench
