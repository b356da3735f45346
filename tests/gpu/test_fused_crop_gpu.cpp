// The fused crop kernel on a GPU host ([gpu]): bit for bit against its CPU reference, job tables
// of launches in flight, graph capture; and its micro-benchmark against the device crop that
// data.decode: device runs today (hidden: ./build/tests/trainbench_tests "[bench-crop]").
#if TRAINBENCH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "gpu/crop_jobs.hpp"
#include "trainbench/cuda/fused_crop.hpp"
#include "trainbench/data/crop.hpp"
#include "trainbench/data/fused_crop.hpp"

using namespace trainbench;

namespace {

void require_gpu() {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
}

void check_cuda(cudaError_t e) { REQUIRE(e == cudaSuccess); }

// A batch of random images, on the host and the same bytes on the device, with its jobs.
struct test_batch {
  std::vector<at::Tensor> host, device;  // one uint8 tensor per image: height x pitch
  std::vector<fused_crop_job> host_jobs, device_jobs;
};

test_batch random_batch(std::uint32_t seed, int n, int size, int max_side = 500) {
  std::mt19937 rng(seed);
  test_batch b;
  for (int i = 0; i < n; ++i) {
    fused_crop_job j = tbgpu::random_crop_job(rng, seed, i, size, max_side);
    at::Tensor px = at::randint(0, 256, {j.height, j.pitch}, at::TensorOptions().dtype(at::kByte));
    b.host.push_back(px);
    b.device.push_back(px.to(at::kCUDA));
    j.pixels = b.host.back().data_ptr<std::uint8_t>();
    b.host_jobs.push_back(j);
    j.pixels = b.device.back().data_ptr<std::uint8_t>();
    b.device_jobs.push_back(j);
  }
  return b;
}

at::ScalarType scalar_type(crop_dtype d) {
  return d == crop_dtype::float32 ? at::kFloat : d == crop_dtype::float16 ? at::kHalf : at::kBFloat16;
}

// The reference's batch, as bytes.
at::Tensor reference(const test_batch& b, int size, crop_layout layout, crop_dtype dtype,
                     const fused_crop_normalizer& norm) {
  const std::int64_t n = static_cast<std::int64_t>(b.host_jobs.size());
  at::Tensor out = at::zeros({n, 3 * size * size}, at::TensorOptions().dtype(scalar_type(dtype)));
  fused_crop_output o;
  o.ptr = out.data_ptr();
  o.slot_stride = 3LL * size * size;
  o.size = size;
  o.layout = layout;
  o.dtype = dtype;
  for (std::int64_t i = 0; i < n; ++i)
    fused_crop_reference(b.host_jobs[static_cast<std::size_t>(i)], static_cast<int>(i), o, norm);
  return out;
}

fused_crop_output device_output(at::Tensor& out, int size, crop_layout layout, crop_dtype dtype) {
  fused_crop_output o;
  o.ptr = out.data_ptr();
  o.slot_stride = 3LL * size * size;
  o.size = size;
  o.layout = layout;
  o.dtype = dtype;
  return o;
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

fused_crop_normalizer imagenet() { return fused_normalizer(normalizer({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})); }

// Holds a stream until released: the launches queued behind it are all in flight at once. Opened
// and the stream drained on the way out too, so a failed check cannot leave the stream held.
struct stream_gate {
  explicit stream_gate(cudaStream_t s) : stream(s) { check_cuda(cudaLaunchHostFunc(stream, &stream_gate::wait, this)); }
  ~stream_gate() {
    open = true;
    (void)cudaStreamSynchronize(stream);
  }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;
  static void CUDART_CB wait(void* self) {
    auto* g = static_cast<stream_gate*>(self);
    while (!g->open.load()) {
    }
  }
  cudaStream_t stream;
  std::atomic<bool> open{false};
};

}  // namespace

TEST_CASE("fused crop kernel: its CPU reference bit for bit, every dtype and layout", "[gpu]") {
  require_gpu();
  const fused_crop_normalizer norm = imagenet();
  fused_crop_launcher launcher;
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  for (int size : {224, 37})
    for (crop_dtype dtype : {crop_dtype::float32, crop_dtype::float16, crop_dtype::bfloat16})
      for (crop_layout layout : {crop_layout::nchw, crop_layout::nhwc}) {
        INFO("S " << size << ", " << crop_dtype_name(dtype) << ", " << crop_layout_name(layout));
        const test_batch b = random_batch(
            static_cast<std::uint32_t>(size * 10 + static_cast<int>(dtype) * 2 + static_cast<int>(layout)), 24, size);
        at::Tensor out =
            at::full({24, 3 * size * size}, 7, at::TensorOptions().dtype(scalar_type(dtype)).device(at::kCUDA));
        launcher.launch(b.device_jobs.data(), 24, device_output(out, size, layout, dtype), norm, stream.stream());
        CHECK(same_bytes(out, reference(b, size, layout, dtype, norm)));
      }
}

TEST_CASE("fused crop kernel: launches in flight each keep their own job table", "[gpu]") {
  require_gpu();
  const fused_crop_normalizer norm = imagenet();
  const int size = 32, n = 8;
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  fused_crop_launcher launcher;
  std::vector<test_batch> batches;
  std::vector<at::Tensor> outs;
  for (int k = 0; k < 3; ++k) {
    batches.push_back(random_batch(100 + static_cast<std::uint32_t>(k), n, size));
    outs.push_back(at::zeros({n, 3 * size * size}, at::TensorOptions().device(at::kCUDA)));
  }
  check_cuda(cudaDeviceSynchronize());  // the inputs and zeroed outputs, made on the default stream
  // The three tables made now: cudaMalloc and cudaHostAlloc may wait for the device, which would
  // wait for the gate, which would wait for this thread.
  launcher.reserve(n, 3);
  stream_gate gate(stream.stream());
  // One jobs array, overwritten between the launches, all three queued behind the gate.
  std::vector<fused_crop_job> jobs(n);
  for (int k = 0; k < 3; ++k) {
    jobs = batches[static_cast<std::size_t>(k)].device_jobs;
    launcher.launch(jobs.data(), n,
                    device_output(outs[static_cast<std::size_t>(k)], size, crop_layout::nchw, crop_dtype::float32),
                    norm, stream.stream());
  }
  CHECK(launcher.tables() == 3);
  gate.open = true;
  check_cuda(cudaStreamSynchronize(stream.stream()));
  for (int k = 0; k < 3; ++k)
    CHECK(same_bytes(outs[static_cast<std::size_t>(k)], reference(batches[static_cast<std::size_t>(k)], size,
                                                                  crop_layout::nchw, crop_dtype::float32, norm)));
  // Once they have finished, a table is reused.
  launcher.launch(batches[0].device_jobs.data(), n,
                  device_output(outs[1], size, crop_layout::nchw, crop_dtype::float32), norm, stream.stream());
  check_cuda(cudaStreamSynchronize(stream.stream()));
  CHECK(launcher.tables() == 3);
  CHECK(same_bytes(outs[1], outs[0]));
}

TEST_CASE("fused crop kernel: under CUDA graph capture each replay crops the captured batch", "[gpu]") {
  require_gpu();
  const fused_crop_normalizer norm = imagenet();
  const int size = 48, n = 6;
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  const test_batch a = random_batch(7, n, size), b = random_batch(8, n, size);
  at::Tensor out = at::zeros({n, 3 * size * size}, at::TensorOptions().dtype(at::kHalf).device(at::kCUDA));
  const fused_crop_output o = device_output(out, size, crop_layout::nhwc, crop_dtype::float16);
  fused_crop_launcher launcher;
  std::vector<fused_crop_job> jobs = a.device_jobs;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaDeviceSynchronize());  // the inputs and zeroed output, made on the default stream
  check_cuda(cudaStreamBeginCapture(stream.stream(), cudaStreamCaptureModeGlobal));
  launcher.launch(jobs.data(), n, o, norm, stream.stream());
  check_cuda(cudaStreamEndCapture(stream.stream(), &graph));
  check_cuda(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(launcher.captured_tables() == 1);
  jobs = b.device_jobs;  // the caller's array is free once launch() returns
  const at::Tensor want_a = reference(a, size, crop_layout::nhwc, crop_dtype::float16, norm);
  const at::Tensor want_b = reference(b, size, crop_layout::nhwc, crop_dtype::float16, norm);
  for (int replay = 0; replay < 2; ++replay) {
    // An eager launch of another batch in between, into the same output: it takes a table of its own.
    launcher.launch(jobs.data(), n, o, norm, stream.stream());
    check_cuda(cudaStreamSynchronize(stream.stream()));
    CHECK(same_bytes(out, want_b));
    check_cuda(cudaGraphLaunch(exec, stream.stream()));
    check_cuda(cudaStreamSynchronize(stream.stream()));
    CHECK(same_bytes(out, want_a));
  }
  CHECK(launcher.captured_tables() == 1);
  check_cuda(cudaGraphExecDestroy(exec));
  check_cuda(cudaGraphDestroy(graph));
}

// The crop of data.decode: device before the fused kernel (cuda/nvjpeg_decode.cpp's crop_resize
// and its normalisation), per image, for the benchmark.
namespace {
void aten_crop(const at::Tensor& img, const resize_plan& p, int s, at::Tensor dst) {
  at::Tensor crop = img.narrow(0, p.y.lo, p.y.hi - p.y.lo).narrow(1, p.x.lo, p.x.hi - p.x.lo);
  at::Tensor x = crop.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
  x = at::_upsample_bilinear2d_aa(x, {p.y.out_total, p.x.out_total}, false);
  x = x.narrow(2, p.y.out_first, s).narrow(3, p.x.out_first, s);
  if (p.flip) x = x.flip({3});
  dst.copy_(x[0]);
}
}  // namespace

// Hidden, and left out of ctest (tests/CMakeLists.txt): ./build/tests/trainbench_tests "[bench-crop]".
// ImageNet-like 500 x 375 RGB images already on the device (no decode), RandomResizedCrop(224) +
// flip + normalise, batches of 64: milliseconds per batch, from CUDA events over 50 batches after
// 5 warm-up batches.
TEST_CASE("fused crop benchmark: the fused kernel against the per-image ATen crop", "[.][gpu][bench-crop]") {
  require_gpu();
  const int n = 64, s = 224, w = 500, h = 375, iterations = 50;
  const normalizer host_norm({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
  const fused_crop_normalizer norm = fused_normalizer(host_norm);
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(stream);
  at::Tensor arena = at::randint(0, 256, {n, h, w, 3}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
  std::vector<resize_plan> plans;
  std::vector<fused_crop_job> jobs;
  for (int i = 0; i < n; ++i) {
    sample_rng sr(1, 0, i);
    plans.push_back(train_plan(random_resized_crop(h, w, sr), s, i % 2 == 0));
    fused_crop_job j;
    j.pixels = arena[i].data_ptr<std::uint8_t>();
    j.pitch = 3LL * w;
    j.width = w;
    j.height = h;
    j.channels = 3;
    j.plan = fused_plan(plans.back());
    jobs.push_back(j);
  }
  at::Tensor scale =
      at::tensor(std::vector<float>(host_norm.scale, host_norm.scale + 3)).view({1, 3, 1, 1}).to(at::kCUDA);
  at::Tensor bias = at::tensor(std::vector<float>(host_norm.bias, host_norm.bias + 3)).view({1, 3, 1, 1}).to(at::kCUDA);
  at::Tensor aten_out = at::empty({n, 3, s, s}, at::TensorOptions().device(at::kCUDA));
  auto time_ms = [&](const std::function<void()>& batch) {
    for (int k = 0; k < 5; ++k) batch();
    cudaEvent_t start, stop;
    check_cuda(cudaEventCreate(&start));
    check_cuda(cudaEventCreate(&stop));
    check_cuda(cudaEventRecord(start, stream.stream()));
    for (int k = 0; k < iterations; ++k) batch();
    check_cuda(cudaEventRecord(stop, stream.stream()));
    check_cuda(cudaEventSynchronize(stop));
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop));
    check_cuda(cudaEventDestroy(start));
    check_cuda(cudaEventDestroy(stop));
    return ms / iterations;
  };
  const float aten_ms = time_ms([&] {
    for (int i = 0; i < n; ++i) aten_crop(arena[i], plans[static_cast<std::size_t>(i)], s, aten_out[i]);
    aten_out.mul_(scale).add_(bias);
  });
  std::printf("bench-crop: %d images %dx%d RGB -> %dx%d, on %s\n", n, w, h, s, s,
              at::cuda::getCurrentDeviceProperties()->name);
  std::printf(
      "bench-crop: per-image ATen crop (data.decode: device today), float32 NCHW: %.3f ms per batch, %.0f images/s\n",
      aten_ms, n * 1000.0 / aten_ms);
  fused_crop_launcher launcher;
  for (crop_dtype dtype : {crop_dtype::float32, crop_dtype::float16, crop_dtype::bfloat16})
    for (crop_layout layout : {crop_layout::nchw, crop_layout::nhwc}) {
      at::Tensor out = at::empty({n, 3 * s * s}, at::TensorOptions().dtype(scalar_type(dtype)).device(at::kCUDA));
      const fused_crop_output o = device_output(out, s, layout, dtype);
      const float ms = time_ms([&] { launcher.launch(jobs.data(), n, o, norm, stream.stream()); });
      std::printf("bench-crop: fused kernel, %s %s: %.3f ms per batch, %.0f images/s (%.1fx)\n", crop_dtype_name(dtype),
                  crop_layout_name(layout), ms, n * 1000.0 / ms, aten_ms / ms);
      if (dtype == crop_dtype::float32 && layout == crop_layout::nchw) {
        const double diff = (out.view({n, 3, s, s}) - aten_out).abs().max().item<double>();
        std::printf("bench-crop: largest difference from the ATen crop, float32: %.3g (one grey level is %.3g)\n", diff,
                    1.0 / (255 * 0.229));
      }
    }
  std::fflush(stdout);
}
#endif
