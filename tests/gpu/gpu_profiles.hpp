#pragma once
// The profiles the [gpu] tests write, in one place: the CPU test "every profile a [gpu] test
// writes loads, and --strict accepts it on CUDA" (tests/config/test_shipped_profiles.cpp) parses
// each of them in CI, so a profile that no longer loads (a key written twice, a renamed key)
// fails there, not first on a GPU host.
#include <string>
#include <vector>

namespace tbgpu {

// test_gpu.cpp's pipelines: synthetic 32 px images on CUDA. `data` holds more keys of the data
// block ("pin_memory: true, workers: 2"), `extra` more blocks; a block of its own for `data`
// would write the key twice.
inline std::string pipeline_profile(const std::string& data = "", const std::string& extra = "") {
  return "name: gpu\ndevice: cuda\ndata: {source: synthetic, samples: 512, image_size: 32" +
         (data.empty() ? "" : ", " + data) +
         "}\n"
         "train: {batch_size: 16}\nmeasure: {warmup_batches: 3, measured_batches: 10}\n" +
         extra;
}

// The data keys and blocks test_gpu.cpp's tests give pipeline_profile.
struct pipeline_variant {
  const char* data;
  const char* extra;
};
constexpr pipeline_variant blocking{"", ""};
constexpr pipeline_variant copy_stream_depth_3{"pin_memory: true, workers: 2",
                                               "transfer: {copy_stream: true, depth: 3}\n"};
constexpr pipeline_variant copy_stream_depth_2{"pin_memory: true, workers: 2",
                                               "transfer: {copy_stream: true, depth: 2}\n"};
constexpr pipeline_variant copy_stream_pinned{"pin_memory: true", "transfer: {copy_stream: true}\n"};
inline std::vector<pipeline_variant> pipeline_variants() {
  return {blocking, copy_stream_depth_3, copy_stream_depth_2, copy_stream_pinned};
}

// test_cuda_paths.cpp
inline std::string auto_seed_profile() {
  return "name: auto-seed\ndevice: cuda\nseed: 7\nmodel: {arch: resnet18}\n"
         "data: {source: device-synthetic, image_size: 224}\ntrain: {batch_size: auto}\n"
         "backend: {cudnn_benchmark: false, tf32: false}\n"
         "measure: {warmup_batches: 1, measured_batches: 1, repeats: 1, nvtx: off}\n";
}
inline std::string second_device_profile() {
  return "name: second\ndevice: cuda:1\ndata: {source: device-synthetic, image_size: 32}\ntrain: {batch_size: 8}\n";
}
inline const std::vector<std::string>& transfer_index_variants() {
  static const std::vector<std::string> v = {"{}", "{non_blocking: true}", "{copy_stream: true, depth: 3}"};
  return v;
}
inline std::string transfer_index_profile(const std::string& transfer) {
  return "name: index\ndevice: cuda\n"
         "data: {source: synthetic, samples: 64, image_size: 8, workers: 2, prefetch_factor: 1, pin_memory: true}\n"
         "train: {batch_size: 4}\ntransfer: " +
         transfer + "\n";
}

// test_gpu_decode.cpp
inline std::string decode_bench_profile(const std::string& folder) {
  return "name: nvjpeg\ndevice: cuda\nmodel: {num_classes: 2}\n"
         "data: {source: imagefolder, path: '" +
         folder +
         "', decode: device, workers: 2}\ntrain: {batch_size: 8}\n"
         "measure: {warmup_batches: 2, measured_batches: 3, repeats: 3}\n";
}

// test_gpu_trace.cpp
inline std::string trace_profile(const std::string& report) {
  return "name: gpu-trace\ndevice: cuda\nseed: 1\n"
         "data: {source: synthetic, samples: 1024, image_size: 64, workers: 2, pin_memory: true}\n"
         "transfer: {non_blocking: true, copy_stream: true}\ntrain: {batch_size: 32}\n"
         "measure: {warmup_batches: 5, measured_batches: 8, repeats: 3}\n"
         "report: {path: '" +
         report + "'}\n";
}

// test_gpu.cpp's NCCL run: appended to tbtest::tiny_profile.
inline std::string nccl_extra() { return "dist: {backend: nccl, timeout_s: 60}\n"; }

}  // namespace tbgpu
