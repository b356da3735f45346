// The fused crop kernel (cuda/fused_crop.cu) against its CPU reference, bit for bit, in a program
// without LibTorch: random images of every size up to 500 px, grayscale among them, padded row
// pitches, train crops with flips and eval crops, each dtype and layout. Every image and the
// output are allocations of their exact size, so compute-sanitizer's memcheck reports any read or
// write past one; racecheck checks the kernel's shared memory. The GPU kit runs it under both:
// a process that loads LibTorch's CUDA library takes tens of seconds to start under the
// sanitizer, this one a second. The [gpu] case "fused crop kernel: its CPU reference bit for bit,
// every dtype and layout" checks the same inside the test binary.
//
// Exit 0: every batch equal; 1: a batch differs or CUDA failed; 2: no CUDA device (it says so).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/crop_jobs.hpp"
#include "trainbench/cuda/fused_crop.hpp"
#include "trainbench/data/crop.hpp"
#include "trainbench/data/fused_crop.hpp"

using namespace trainbench;

namespace {

void cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device memory of exactly `bytes`, freed with it.
struct device_buffer {
  void* ptr = nullptr;
  explicit device_buffer(std::size_t bytes) { cuda(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~device_buffer() { (void)cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

struct batch {
  std::vector<std::vector<std::uint8_t>> host;
  std::vector<std::unique_ptr<device_buffer>> device;
  std::vector<fused_crop_job> host_jobs, device_jobs;
};

// The [gpu] case's random batch (tbgpu::random_crop_job: the same sizes, pitches, crops and
// flips); the pixels from a generator of their own, as that case takes them from ATen's.
batch random_batch(std::uint32_t seed, int n, int size) {
  std::mt19937 rng(seed), pixel_rng(seed ^ 0x9e3779b9u);
  batch b;
  for (int i = 0; i < n; ++i) {
    fused_crop_job j = tbgpu::random_crop_job(rng, seed, i, size);
    std::vector<std::uint8_t> px(static_cast<std::size_t>(j.height * j.pitch));
    for (auto& v : px) v = static_cast<std::uint8_t>(pixel_rng());
    b.device.push_back(std::make_unique<device_buffer>(px.size()));
    cuda(cudaMemcpy(b.device.back()->ptr, px.data(), px.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    b.host.push_back(std::move(px));
    j.pixels = b.host.back().data();
    b.host_jobs.push_back(j);
    j.pixels = static_cast<const std::uint8_t*>(b.device.back()->ptr);
    b.device_jobs.push_back(j);
  }
  return b;
}

fused_crop_output output(void* ptr, int size, crop_layout layout, crop_dtype dtype) {
  fused_crop_output o;
  o.ptr = ptr;
  o.slot_stride = 3LL * size * size;
  o.size = size;
  o.layout = layout;
  o.dtype = dtype;
  return o;
}

// One batch through the kernel and the reference; true where every byte is equal.
bool same(fused_crop_launcher& launcher, int size, crop_dtype dtype, crop_layout layout, std::uint32_t seed) {
  constexpr int n = 24;
  const fused_crop_normalizer norm =
      fused_normalizer(normalizer({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}));
  const batch b = random_batch(seed, n, size);
  const std::size_t bytes = static_cast<std::size_t>(n) * 3 * size * size * crop_dtype_bytes(dtype);
  std::vector<std::uint8_t> expected(bytes, 0), got(bytes, 1);
  for (int i = 0; i < n; ++i)
    fused_crop_reference(b.host_jobs[static_cast<std::size_t>(i)], i, output(expected.data(), size, layout, dtype),
                         norm);
  device_buffer out(bytes);
  // 0xff bytes are NaN in every dtype: a value the kernel does not write never equals the reference.
  cuda(cudaMemset(out.ptr, 0xff, bytes), "cudaMemset");
  launcher.launch(b.device_jobs.data(), n, output(out.ptr, size, layout, dtype), norm, nullptr);
  cuda(cudaDeviceSynchronize(), "the fused crop kernel");
  cuda(cudaMemcpy(got.data(), out.ptr, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return std::memcmp(got.data(), expected.data(), bytes) == 0;
}

// Every batch; the launcher (and its job tables) gone before it returns.
int run() {
  try {
    int batches = 0, differ = 0;
    fused_crop_launcher launcher;
    for (int size : {224, 37})
      for (crop_dtype dtype : {crop_dtype::float32, crop_dtype::float16, crop_dtype::bfloat16})
        for (crop_layout layout : {crop_layout::nchw, crop_layout::nhwc}) {
          const auto seed = static_cast<std::uint32_t>(size * 10 + static_cast<int>(dtype) * 2 + static_cast<int>(layout));
          ++batches;
          if (same(launcher, size, dtype, layout, seed)) continue;
          ++differ;
          std::printf("crop check: S %d, %s, %s: the kernel's batch differs from the CPU reference\n", size,
                      crop_dtype_name(dtype), crop_layout_name(layout));
        }
    std::printf("crop check: %d of %d batches of 24 images bit for bit as the CPU reference\n", batches - differ,
                batches);
    return differ == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("crop check: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("crop check: no CUDA device\n");
    return 2;
  }
  const int rc = run();
  // compute-sanitizer's leak check reports what the context still holds when it is destroyed.
  (void)cudaDeviceReset();
  return rc;
}
