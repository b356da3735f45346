#pragma once
// A profile is the YAML file as plain structs, one per concern. Nothing after loading reads YAML.
#include <cstdint>
#include <string>
#include <vector>

namespace trainbench {

enum class data_source { cifar10, fashion_mnist, mnist, synthetic, device_synthetic, imagefolder };
enum class preprocess_place { host, device };
enum class data_fallback { none, synthetic };
enum class amp_mode { off, fp16, bf16 };
enum class switch_mode { automatic, on, off };
enum class nvtx_level { off, batch, stage };
enum class dist_backend { none, automatic, gloo, nccl };
enum class data_transform { train, eval };
enum class decode_place { host, device };
enum class bad_file_policy { error, skip };
enum class fused_bn_route { automatic, graph, ex };

struct model_config {
  std::string arch = "resnet18";
  int num_classes = 10;
  std::string weights;  // empty: random init (torchvision's)
  bool channels_last = false;
  bool zero_init_residual = false;  // torchvision's: each residual branch's last batch norm starts at 0
};

struct normalize_config {
  std::vector<double> mean{0.5, 0.5, 0.5};
  std::vector<double> std{0.5, 0.5, 0.5};
};

struct data_config {
  data_source source = data_source::synthetic;
  std::string path;  // empty: the source's default location
  std::string split = "train";
  int image_size = 224;
  normalize_config normalize;
  int workers = 0;
  int prefetch_factor = 2;
  bool pin_memory = false;
  bool shuffle = true;
  bool drop_last = true;
  preprocess_place preprocess = preprocess_place::host;
  data_fallback fallback = data_fallback::none;  // when the dataset's files are missing
  int samples = 2048;                            // synthetic: images generated once
  int source_size = 32;                          // synthetic: side of the generated uint8 images
  // imagefolder (JPEG folders in torchvision's ImageFolder layout):
  data_transform transform = data_transform::train;  // RandomResizedCrop + flip, or Resize + CenterCrop
  decode_place decode = decode_place::host;          // libjpeg-turbo in the workers, or nvJPEG on the GPU
  // decode: device: files the GPU's JPEG engines cannot take (progressive, CMYK, ...): libjpeg-turbo
  // in the workers (their crop's region, shipped as pixels), or on the device's side of the loader
  // (nvJPEG's general backend on the training thread, or libjpeg-turbo there).
  decode_place decode_off_engines = decode_place::host;
  // decode: device with decode_off_engines: host: the share of each batch offered to the device's
  // decoder; the loader's workers decode the rest as they decode the engines' misses (NVIDIA
  // DALI's hw_decoder_load). 1: every file the device can take goes there.
  double device_decode_share = 1.0;
  bad_file_policy on_bad_file = bad_file_policy::error;
  bool partial_decode = true;  // false: decode every JPEG whole (host: at full resolution; device: no regions)
  int max_image_pixels = 89478485;  // PIL's Image.MAX_IMAGE_PIXELS: larger headers are refused unread
  int max_image_bytes = 256 << 20;  // larger files are refused unread (a bad file), not read whole
};

struct optimizer_config {
  std::string name = "sgd";
  double lr = 0.001;
  double momentum = 0.9;
  double weight_decay = 0.0;
  bool foreach = false;
};

struct train_config {
  int batch_size = 32;
  bool batch_size_auto = false;
  int grad_accumulation = 1;
  optimizer_config optimizer;
  amp_mode amp = amp_mode::off;
  switch_mode grad_scaler = switch_mode::automatic;
};

struct transfer_config {
  bool non_blocking = false;
  bool copy_stream = false;
  int depth = 2;
};

struct backend_config {
  bool cudnn_benchmark = false;
  bool tf32 = false;
  bool cuda_graph = false;
  // What a compiler does for this model family: NHWC, batch-norm fusions, fused SGD, one graph.
  bool compile = false;
  // How backend.compile fuses batch norm with ReLU (and the add) on a GPU: cuDNN's graphs, then in
  // fp16 its batch-norm Ex call (auto); or one of them only.
  fused_bn_route fused_batch_norm = fused_bn_route::automatic;
  // The stem convolution's input and weights padded from 3 to 4 channels of zeros, as NVIDIA's
  // MLPerf ResNet feeds it: cuDNN's tensor-core NHWC kernels want 4 or 8 input channels.
  bool pad_stem = false;
  // Every batch norm whose ReLU feeds only a convolution runs with it as one op, NVIDIA's MLPerf
  // ResNet convolution fusions (cuDNN's graphs; CUDA, NHWC). A switch of its own, beside compile.
  bool conv_fusion = false;
};

struct measure_config {
  int warmup_batches = 5;
  int measured_batches = 3;
  int repeats = 1;          // windows; the minimum when max_repeats is set
  int processes = 1;        // fresh processes `run` measures the profile in, pooled into one report
  int max_repeats = 0;      // 0: exactly `repeats`; else add windows until target_cv or this many
  double target_cv = 0.02;  // stdev / mean of the windows' samples/s at which adding windows stops
  double min_window_s = 0;  // 0: measured_batches per window; else more batches until a window lasts this long
  nvtx_level nvtx = nvtx_level::batch;
  std::string trace;  // Chrome trace-event JSON of every measured batch ("" off; {rank}: one file per rank)
  bool kernel_families = true;  // one profiled window after the measured ones: device time per kernel family
};

struct report_config {
  std::string path = "reports/{name}.json";
};

struct dist_config {
  dist_backend backend = dist_backend::none;
  double timeout_s = 300;
  // A rank whose heartbeat (or whose store) stays silent this long is lost; 0: only timeout_s.
  double heartbeat_timeout_s = 10;
  double bucket_mb = 25;
};

struct profile {
  std::string name = "unnamed";
  std::string description;
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  std::uint64_t seed = 0;
  int threads = 0;
  model_config model;
  data_config data;
  train_config train;
  transfer_config transfer;
  backend_config backend;
  measure_config measure;
  report_config report;
  dist_config dist;
};

// Names as written in YAML, shared by loading, emitting and the report.
const char* to_string(data_source v);
const char* to_string(preprocess_place v);
const char* to_string(data_fallback v);
const char* to_string(amp_mode v);
const char* to_string(switch_mode v);
const char* to_string(nvtx_level v);
const char* to_string(dist_backend v);
const char* to_string(data_transform v);
const char* to_string(decode_place v);
const char* to_string(bad_file_policy v);
const char* to_string(fused_bn_route v);

// The batch-norm route a run takes: backend.fused_batch_norm, except `ex` outside fp16 (ineffective,
// noted), which takes `auto`.
fused_bn_route fused_batch_norm_route(const profile& p);
// Whether fp16 loss scaling is on, after resolving `auto`.
bool grad_scaler_enabled(const train_config& t);
// The report path with {name} substituted.
// report.path with {name} replaced; bench-data's goes beside run's, not over it
// (reports/x.json -> reports/x.bench-data.json).
std::string report_path_for(const profile& p, bool bench_data = false);

}  // namespace trainbench
