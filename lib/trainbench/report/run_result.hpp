#pragma once
// Plain numbers from a run: what the runner measured, before any formatting (no torch here).
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace trainbench {

// Why fp16 loss scaling skipped a step: the input batch held inf or nan; else the loss was inf or
// nan (the forward pass); else only the scaled gradients overflowed (the backward pass).
inline constexpr const char* skip_cause_names[3] = {"input", "forward", "backward"};

struct window_result {
  std::int64_t samples = 0;
  double elapsed_s = 0;
  double samples_per_s = 0;
  int process = 0;  // the fresh process that measured it, 0-based, in a report pooled from several
};

// What a fresh process costs before its first measured window (none of it is measured work);
// empty where the process never got that far.
struct process_cost {
  std::optional<double> to_first_window_s;  // from the process's start (exec) to its first measured window
  std::optional<double> build_s;            // the pipeline: model, data index, buffers, threads, device
  std::optional<double> warmup_s;           // warmup batches, a CUDA graph's capture, window calibration
  // When the process measured (wall clock, Unix seconds): its first window's start and its last
  // window's end. compare tells from them whether two sides were interleaved or measured apart.
  std::optional<double> measured_from_unix_s, measured_to_unix_s;
};

struct memory_result {
  std::optional<std::int64_t> device_peak_allocated_bytes, device_peak_reserved_bytes;
  std::optional<std::int64_t> host_peak_rss_bytes;
};

struct telemetry_result {
  std::string source = "none";  // "nvml" or "none"
  std::optional<double> gpu_util_pct_mean, mem_util_pct_mean, sm_clock_mhz_mean, power_w_mean;
  std::optional<std::uint64_t> throttle_reasons_seen;  // bitwise or of NVML's reasons
  std::size_t samples = 0;
};

// One rank's own figures, as gathered by rank 0.
struct rank_result {
  int rank = 0;
  std::vector<window_result> windows;
  std::optional<double> allreduce_s_median;  // the runner's allreduce stage (exposed wait)
};

// Where a rank ran, as it posted it at the rendezvous.
struct rank_host {
  std::string host;     // gethostname()
  std::string address;  // the address its Gloo traffic used (empty on NCCL, which picks its own)
};

// A data-parallel run, as rank 0 reports it.
struct dist_result {
  std::string backend, launcher;
  int world = 1, rank = 0, local_world = 1;
  std::int64_t global_batch_size = 0;
  double bucket_cap_mb = 0;
  std::vector<std::int64_t> bucket_bytes;
  std::vector<rank_result> ranks;
  std::vector<rank_host> hosts;  // by rank; known from the rendezvous on, so a failed run has them too
  // How many ranks' samples the result's windows sum: world once the ranks' measurements were
  // gathered, 1 (this rank's own) when they could not be.
  int ranks_in_results = 1;
  std::optional<std::string> baseline_report;
  std::optional<double> baseline_samples_per_s, scaling_efficiency;
};

// What the loader's workers did during one measured window (their counters, read after it).
struct loader_window {
  double elapsed_s = 0;  // the window's
  std::int64_t images = 0;
  double fill_s = 0;       // summed over workers: time spent filling batches
  double phase_s[3] = {};  // read, decode, crop_resize (with normalize); summed over workers and images
};

struct skipped_file_record {
  std::string path, reason;
  int processes = 1;  // in a pooled report: how many of its processes skipped the file
};

struct loader_result {
  int workers = 0;      // 0: the training thread fills batches
  bool phases = false;  // per-image phases measured (image folders)
  std::vector<loader_window> windows;
  std::vector<skipped_file_record> skipped_files;  // data.on_bad_file: skip; each file once
  std::int64_t replaced_samples = 0;
};

// data.decode: device: what the nvJPEG stage decoded, and how, per window and what it holds.
struct device_decode_window {
  std::int64_t images_device = 0, host_fallbacks = 0;
  std::int64_t images_hardware = 0, images_cuda = 0;  // images_device split by nvJPEG backend
  std::int64_t pageable_batches = 0;
  double submit_host_s = 0;         // the decoder's host time in submit, all phases
  std::int64_t images_workers = 0;  // decoded by the loader's workers, copied up
  std::int64_t hardware_refusals = 0;  // batched calls the engines refused whole, retries included
};
// The decoder's host time in submit by phase, seconds (see device_decode_counts).
struct decode_host_phases {
  double route = 0, hardware = 0, cuda = 0, host = 0, crop = 0;
};
struct device_decode_result {
  std::vector<device_decode_window> windows;
  std::int64_t images_device = 0;     // the whole run, warmup included: images_hardware + images_cuda
  std::int64_t images_hardware = 0;   // by the hardware backend (the GPU's JPEG engines)
  std::int64_t images_region = 0;     // of those, decoded as their crop's region of interest only
  std::int64_t state_waits = 0;       // hardware batches whose submit waited for a free nvJPEG state
  std::int64_t hardware_refusals = 0;      // batched calls the engines refused whole, retries included
  std::int64_t hardware_refused_files = 0;  // files found refused alone, sent off the engines from then on
  std::int64_t arena_waits = 0;  // hardware calls whose host waited for their arena's last crops, or new arenas
  double host_wait_s = 0;  // the training thread's time in those waits and the state waits (in submit_host_s.hardware)
  std::int64_t images_cuda = 0;       // by nvJPEG's general backend (CUDA)
  std::int64_t host_fallbacks = 0;    // files sent to or refused by nvJPEG's backends, decoded on the host
  std::int64_t images_workers = 0;    // files the engines cannot take, decoded by the loader's workers
  std::int64_t pageable_batches = 0;  // batches whose files nvJPEG read from pageable memory (not the pinned ring)
  decode_host_phases submit_host_s;   // the whole run, warmup included
  std::int64_t replaced_samples = 0;  // files neither could decode, replaced (data.on_bad_file: skip)
  std::int64_t bytes_held = 0;        // the two pixel arenas at the end (a pooled report: the largest)
  std::int64_t peak_bytes_held = 0;
};

// One kernel name's part of a family: what the classification put there, for checking it.
struct kernel_top {
  std::string name;  // as the profiler reports it, cut to kernel_top_name_chars
  double seconds = 0;
  std::int64_t kernels = 0;
};
constexpr std::size_t kernel_tops = 5;              // kept per family
constexpr std::size_t kernel_top_name_chars = 160;  // cuDNN's template names run to kilobytes

// Each kernel family's device time in a profiled window after the measured ones (measure.kernel_families).
struct kernel_family_result {
  bool measured = false;
  std::string reason;  // where not measured: why
  std::string source;  // how it was measured
  int batches = 0;     // profiled batches (summed over pooled processes)
  std::int64_t kernels = 0;
  std::int64_t dropped = 0;  // records left out as unusable (timestamps out of the trace), not counted
  std::map<std::string, double> seconds;             // family -> kernel seconds over the batches
  std::map<std::string, std::vector<kernel_top>> top;  // family -> its longest kernel names, longest first
};

struct run_result {
  std::vector<window_result> windows;
  std::vector<process_cost> processes;                  // one per fresh process; windows[i].process indexes it
  std::map<std::string, std::vector<double>> stages_s;  // stage -> seconds per measured batch
  std::vector<double> overlap_shares;                   // per window, copy stream only
  // Per measured batch: the stages' times summed, minus the batch's. Above 0 where stages ran at
  // the same time (the host loading while the device runs the previous step, a copy stream).
  std::vector<double> stages_overlap_s;
  std::vector<double> allreduce_span_s;                // per synchronised step: first launch -> last done (Gloo)
  std::vector<double> allreduce_launched_in_backward;  // per synchronised step: share of buckets started in backward
  std::optional<dist_result> dist;                     // data-parallel runs
  std::optional<loader_result> loader;                 // runs with a host loader
  std::optional<device_decode_result> device_decode;   // data.decode: device, where nvJPEG ran
  std::optional<kernel_family_result> kernel_families;  // runs with a model (not bench-data)
  std::optional<double> loss_first, loss_last;
  std::optional<std::int64_t> skipped_steps;  // fp16 loss scaling: optimizer steps skipped for inf/nan
  // ... by cause, in the order of skip_cause_names (stages/grad_scaler.hpp says what each means)
  std::optional<std::array<std::int64_t, 3>> skipped_by_cause;
  std::optional<double> input_abs_max;  // with it: the largest |input| the step saw; unset if inf/nan
  std::optional<double> loss_scale;
  std::int64_t warmup_batches_done = 0;
  int window_batches = 0;  // batches in each measured window (more than measured_batches with min_window_s)
  // Why measuring stopped: "repeats" (the fixed count), "target_cv" (the windows were quiet
  // enough) or "max_repeats" (still noisy at the cap); see measure.max_repeats.
  std::string stopped_by = "repeats";
  memory_result memory;
  telemetry_result telemetry;
};

// What ran, as opposed to what the profile asked for.
struct effective_settings {
  std::string device = "cpu";
  std::string device_name;
  int intra_op_threads = 0;
  int loader_workers = 0;
  int loader_slots = 0;
  bool pinned_memory = false;
  bool non_blocking = false;
  bool copy_stream = false;
  bool cuda_graph = false;
  // backend.compile: each of its parts that ran ("channels_last", the batch-norm fusions built
  // for this device, "fused_sgd", "cuda_graph"); a part that could not run is in the notes.
  std::vector<std::string> compile;
  bool pad_stem = false;  // backend.pad_stem ran: the stem convolution on 4 channels
  // backend.conv_fusion: the fused batch-norm-ReLU-convolution pairs that ran, with how many of the
  // model's pairs; empty where none did (the notes say why).
  std::vector<std::string> conv_fusion;
  bool cudnn_benchmark = false;
  bool tf32 = false;
  std::string amp = "off";
  bool grad_scaler = false;
  bool channels_last = false;
  std::string preprocess = "host";
  std::string decode = "none";  // image folders: "host" (libjpeg-turbo) or "device" (nvJPEG)
  std::string transfer;
  std::string step;
  std::string clock;
  std::int64_t batch_size = 0;
  std::vector<std::pair<std::int64_t, bool>> batch_size_search;  // train.batch_size: auto, (batch, fitted)
  std::string dataset;
  std::vector<std::string> notes;  // every requested switch that had no effect, and why
};

}  // namespace trainbench
