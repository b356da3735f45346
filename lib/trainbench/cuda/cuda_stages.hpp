#pragma once
// Entry points to everything that needs CUDA. With a CUDA LibTorch they are implemented in this
// folder; without one, a stub throws if they are ever reached (the CPU path never reaches them).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/measure/clock.hpp"
#include "trainbench/measure/probe.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/stages/train_step.hpp"
#include "trainbench/stages/transfer.hpp"

namespace trainbench {

bool cuda_code_compiled();
std::string cuda_device_name(c10::Device device);

struct cuda_device_facts {
  std::string name, uuid, driver;  // driver: the NVIDIA driver version from NVML, "" without NVML
  std::int64_t memory_bytes = 0;
};
cuda_device_facts cuda_device_info(c10::Device device);

std::unique_ptr<transfer_stage> make_cuda_transfer(c10::Device device, const transfer_config& cfg, bool pinned);
// Times compute-stream stages with CUDA events and h2d on the transfer's copy stream if it has one.
std::unique_ptr<stage_clock> make_cuda_clock(c10::Device device, const transfer_stage* transfer);
std::unique_ptr<device_probe> make_cuda_probe(c10::Device device);
// Makes the run's GPU the current device of the calling thread: once, when the pipeline is built,
// so work that names no device (a pinned allocation, a bare stream or sync) lands on it.
void make_device_current(c10::Device device);
// Eager steps a graph step runs on a side stream before it captures (their updates are undone).
constexpr int graph_warmup_steps = 3;
std::unique_ptr<train_step> make_graph_step(resnet model, const step_options& options,
                                            const std::vector<std::int64_t>& input_shape, bool channels_last);

// data.decode: device (nvJPEG). Null, with the reason in `why`, where libnvjpeg cannot be loaded.
struct nvjpeg_options {
  int image_size = 224;
  std::vector<double> mean, std;
  bool channels_last = false;
  // The batch's dtype: float, or under autocast its fp16/bf16, which the first convolution would
  // cast the batch to anyway (the fused crop then writes it directly, half the bytes).
  at::ScalarType dtype = at::kFloat;
  bool copy_stream = false;  // decode on a side stream, one batch ahead of the step
  // The JPEG engines decode each image's crop region only, where libnvjpeg offers it
  // (nvjpegDecodeBatchedEx); false: whole images (data.partial_decode: false).
  bool regions = true;
  // The loader's workers decode the files the engines cannot take, and ship their crops' regions
  // as pixels (data.decode_off_engines: host); only the describe() text depends on it, the
  // batches say per image what they hold.
  bool off_engines_on_workers = false;
  // With off_engines_on_workers: the share of each batch offered to the device
  // (data.device_decode_share); the workers decode the rest. Only describe() reads it.
  double device_share = 1.0;
  // Chroma upsampled by interpolation (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, libnvjpeg 12.1
  // on), as libjpeg-turbo's default in the host path; no profile key: tests pin it off to see
  // what it changes.
  bool interpolated_chroma = true;
  // Tests only, no profile key: false crops by the per-image ATen ops (crop_by_taps), the fallback
  // where the fused kernel's check fails, so a GPU test can hold them to the host path too.
  bool fused_crop_for_tests = true;
  // Files nvJPEG cannot decode are decoded on the host; these apply to them as to host decoding.
  std::int64_t max_image_pixels = 89478485;
  bool skip_bad_files = false;  // data.on_bad_file: skip
  // Tests only, no profile key: the JPEG engines' batched calls are refused whenever they hold this
  // dataset index, as nvJPEG refuses a file its own check took (no such file is known to make):
  // with nvJPEG's status, without calling it, or (spoiling) by giving the engines a stream with no
  // frame in the file's place, which nvJPEG itself refuses.
  std::int64_t refuse_on_engines_for_tests = -1;
  bool refuse_by_spoiling_for_tests = false;
};
std::unique_ptr<transfer_stage> make_nvjpeg_transfer(c10::Device device, const nvjpeg_options& options,
                                                     std::string& why);

struct batch_search_request {
  c10::Device device = c10::kCUDA;
  std::string arch = "resnet18";
  int num_classes = 10;
  int image_size = 224;
  bool channels_last = false;
  bool cuda_graph = false;
  bool pad_stem = false;  // the model's stem on 4 channels (backend.pad_stem, where it takes effect)
  int input_buffers = 1;  // float batches the run holds beside the step: the transfer stage's, device preprocessing's
  step_options step;
  // backend.compile: each try fuses the batch norms as the run does (input_shape is set to the
  // try's batch, so every shape is built and checked before its first step, as in the run).
  std::optional<fusion_request> fusion;
};
// The largest batch whose whole training step fits (powers of two, then a binary search);
// every try is recorded in `trials` as (batch, fitted).
std::int64_t search_batch_size(const batch_search_request& request, std::vector<std::pair<std::int64_t, bool>>& trials);

struct cuda_versions {
  std::string runtime = "none", cudnn = "none", driver = "none";
};
cuda_versions cuda_library_versions();

}  // namespace trainbench
