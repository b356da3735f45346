// data.decode: device. The loader's workers read the files and plan each crop (the host sampler,
// so crops match host decoding); this stage decodes the batch with nvJPEG's batched API (the
// hardware JPEG engines where the GPU has them, else the GPU-hybrid backend), then crops,
// resizes (the same antialiased bilinear filter as torchvision), flips and normalises on the
// device. libnvjpeg.so.13 is loaded at run time, so a host without it still runs (on the host
// path, with a note saying so).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cuda_transfer.hpp"
#include "trainbench/cuda/fused_crop.hpp"
#include "trainbench/data/crop_tensor.hpp"
#include "trainbench/data/fused_crop.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/load_timing.hpp"
#include "trainbench/stages/device_decode.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"

#if TRAINBENCH_HAVE_NVJPEG_H
#include <nvjpeg.h>
#endif

namespace trainbench {

#if !TRAINBENCH_HAVE_NVJPEG_H

std::unique_ptr<transfer_stage> make_nvjpeg_transfer(c10::Device, const nvjpeg_options&, std::string& why) {
  why = "trainbench was built without nvjpeg.h (scripts/setup.sh installs the nvidia-nvjpeg wheel)";
  return nullptr;
}

#else

namespace {

// The status table in stages/device_decode.cpp classifies by these numbers.
static_assert(NVJPEG_STATUS_SUCCESS == 0 && NVJPEG_STATUS_NOT_INITIALIZED == 1 &&
                  NVJPEG_STATUS_INVALID_PARAMETER == 2 && NVJPEG_STATUS_BAD_JPEG == 3 &&
                  NVJPEG_STATUS_JPEG_NOT_SUPPORTED == 4 && NVJPEG_STATUS_ALLOCATOR_FAILURE == 5 &&
                  NVJPEG_STATUS_EXECUTION_FAILED == 6 && NVJPEG_STATUS_ARCH_MISMATCH == 7 &&
                  NVJPEG_STATUS_INTERNAL_ERROR == 8 && NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED == 9 &&
                  NVJPEG_STATUS_INCOMPLETE_BITSTREAM == 10,
              "nvjpegStatus_t values differ from the table in stages/device_decode.cpp");

// The entry points we use, resolved once from the library.
struct nvjpeg_api {
  decltype(&nvjpegCreateEx) create_ex = nullptr;
  decltype(&nvjpegDestroy) destroy = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&nvjpegDecodeBatchedInitialize) batched_init = nullptr;
  decltype(&nvjpegDecodeBatched) batched = nullptr;
  decltype(&nvjpegDecode) decode = nullptr;
  decltype(&nvjpegGetProperty) property = nullptr;
  decltype(&nvjpegJpegStreamCreate) stream_create = nullptr;
  decltype(&nvjpegJpegStreamDestroy) stream_destroy = nullptr;
  decltype(&nvjpegJpegStreamParse) stream_parse = nullptr;
  decltype(&nvjpegDecodeBatchedSupported) batched_supported = nullptr;
  // Optional: a region of interest per image on the hardware engines (all of these, or none).
  decltype(&nvjpegDecodeParamsCreate) params_create = nullptr;
  decltype(&nvjpegDecodeParamsDestroy) params_destroy = nullptr;
  decltype(&nvjpegDecodeParamsSetROI) params_set_roi = nullptr;
  decltype(&nvjpegDecodeParamsSetOutputFormat) params_set_format = nullptr;
  decltype(&nvjpegJpegStreamParseHeader) parse_header = nullptr;
  decltype(&nvjpegDecodeBatchedSupportedEx) batched_supported_ex = nullptr;
  decltype(&nvjpegDecodeBatchedEx) batched_ex = nullptr;
  // Optional: the engines' buffers made before the first batch, and padding on nvJPEG's own
  // allocations (each of these alone).
  decltype(&nvjpegDecodeBatchedPreAllocate) preallocate = nullptr;
  decltype(&nvjpegSetDeviceMemoryPadding) device_padding = nullptr;
  decltype(&nvjpegSetPinnedMemoryPadding) pinned_padding = nullptr;
  bool has_regions() const {
    return params_create && params_destroy && params_set_roi && params_set_format && parse_header &&
           batched_supported_ex && batched_ex;
  }
  std::string path;
};

// The PyPI wheel's copy first (nvidia/cu13/lib beside torch's CUDA libraries), by the path CMake
// found; then the soname (LD_LIBRARY_PATH, the system); TRAINBENCH_NVJPEG overrides both.
const nvjpeg_api* load_api(std::string& why) {
  static std::once_flag once;
  static nvjpeg_api api;
  static std::string error;
  static bool ok = false;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TRAINBENCH_NVJPEG")) candidates.emplace_back(env);
#ifdef TRAINBENCH_NVJPEG_LIBRARY
    candidates.emplace_back(TRAINBENCH_NVJPEG_LIBRARY);
#endif
    candidates.emplace_back("libnvjpeg.so.13");
    void* lib = nullptr;
    for (const auto& c : candidates) {
      lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        api.path = c;
        break;
      }
      error += (error.empty() ? "" : "; ") + std::string(dlerror());
    }
    if (!lib) return;
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) error = std::string("libnvjpeg lacks ") + name;
      return p;
    };
    api.create_ex = reinterpret_cast<decltype(api.create_ex)>(sym("nvjpegCreateEx"));
    api.destroy = reinterpret_cast<decltype(api.destroy)>(sym("nvjpegDestroy"));
    api.state_create = reinterpret_cast<decltype(api.state_create)>(sym("nvjpegJpegStateCreate"));
    api.state_destroy = reinterpret_cast<decltype(api.state_destroy)>(sym("nvjpegJpegStateDestroy"));
    api.batched_init = reinterpret_cast<decltype(api.batched_init)>(sym("nvjpegDecodeBatchedInitialize"));
    api.batched = reinterpret_cast<decltype(api.batched)>(sym("nvjpegDecodeBatched"));
    api.decode = reinterpret_cast<decltype(api.decode)>(sym("nvjpegDecode"));
    api.property = reinterpret_cast<decltype(api.property)>(sym("nvjpegGetProperty"));
    api.stream_create = reinterpret_cast<decltype(api.stream_create)>(sym("nvjpegJpegStreamCreate"));
    api.stream_destroy = reinterpret_cast<decltype(api.stream_destroy)>(sym("nvjpegJpegStreamDestroy"));
    api.stream_parse = reinterpret_cast<decltype(api.stream_parse)>(sym("nvjpegJpegStreamParse"));
    api.batched_supported =
        reinterpret_cast<decltype(api.batched_supported)>(sym("nvjpegDecodeBatchedSupported"));
    auto optional = [&](const char* name) { return dlsym(lib, name); };
    api.params_create = reinterpret_cast<decltype(api.params_create)>(optional("nvjpegDecodeParamsCreate"));
    api.params_destroy = reinterpret_cast<decltype(api.params_destroy)>(optional("nvjpegDecodeParamsDestroy"));
    api.params_set_roi = reinterpret_cast<decltype(api.params_set_roi)>(optional("nvjpegDecodeParamsSetROI"));
    api.params_set_format =
        reinterpret_cast<decltype(api.params_set_format)>(optional("nvjpegDecodeParamsSetOutputFormat"));
    api.parse_header = reinterpret_cast<decltype(api.parse_header)>(optional("nvjpegJpegStreamParseHeader"));
    api.batched_supported_ex =
        reinterpret_cast<decltype(api.batched_supported_ex)>(optional("nvjpegDecodeBatchedSupportedEx"));
    api.batched_ex = reinterpret_cast<decltype(api.batched_ex)>(optional("nvjpegDecodeBatchedEx"));
    api.preallocate = reinterpret_cast<decltype(api.preallocate)>(optional("nvjpegDecodeBatchedPreAllocate"));
    api.device_padding = reinterpret_cast<decltype(api.device_padding)>(optional("nvjpegSetDeviceMemoryPadding"));
    api.pinned_padding = reinterpret_cast<decltype(api.pinned_padding)>(optional("nvjpegSetPinnedMemoryPadding"));
    ok = api.create_ex && api.destroy && api.state_create && api.state_destroy && api.batched_init && api.batched &&
         api.decode && api.property && api.stream_create && api.stream_destroy && api.stream_parse &&
         api.batched_supported;
  });
  if (!ok) why = "libnvjpeg.so.13 not loadable: " + error;
  return ok ? &api : nullptr;
}

std::string status_text(nvjpegStatus_t s) {
  return std::string(nvjpeg_status_name(static_cast<int>(s))) + " (" + std::to_string(static_cast<int>(s)) + ")";
}

void check(nvjpegStatus_t s, const char* call) {
  if (s != NVJPEG_STATUS_SUCCESS) throw run_error("nvjpeg", std::string(call) + " failed: " + status_text(s));
}

// libnvjpeg's version as major * 1000 + minor; 0 where it does not say.
int library_version(const nvjpeg_api* api) {
  int major = 0, minor = 0;
  if (api->property(MAJOR_VERSION, &major) != NVJPEG_STATUS_SUCCESS ||
      api->property(MINOR_VERSION, &minor) != NVJPEG_STATUS_SUCCESS)
    return 0;
  return major * 1000 + minor;
}

// The handles' flags: chroma upsampled by interpolation, as libjpeg-turbo's "fancy upsampling"
// (on by default, and so in the host path, torchvision and PIL) does, where this libnvjpeg has it
// (12.1 on, the version nvImageCodec's plugins and DALI check before they set it, when asked:
// fancy_upsampling, jpeg_fancy_upsampling). nvJPEG's default repeats each chroma sample, which
// differs from the host path's pixels along every colour edge of a 4:2:0 or 4:2:2 file.
unsigned int handle_flags(const nvjpeg_api* api, bool interpolated_chroma) {
  return interpolated_chroma && library_version(api) >= 12001 ? NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION : 0;
}

// A diagnosis, not a setting: TRAINBENCH_NVJPEG_HW_NO_PIPELINE=1 makes the engines' handle with
// NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE, which stops nvJPEG buffering images beyond a batched call
// (its documentation). If the engines' writes outrun their stream (the `[gpu]` case of a lagging
// device), a GPU run can tell whether that buffering is why without a rebuild.
bool engines_unpipelined() {
  const char* v = std::getenv("TRAINBENCH_NVJPEG_HW_NO_PIPELINE");
  return v != nullptr && std::string(v) == "1";
}

// DALI's defaults: nvJPEG's own device and pinned allocations are rounded up to these, so a
// slightly larger image does not free and allocate again (a cudaFree waits for the whole device).
constexpr std::size_t device_padding_bytes = 16u << 20;
constexpr std::size_t pinned_padding_bytes = 8u << 20;

// A handle, its decode states (the hardware backend's grow with the batches in flight), a
// parsed-stream object (the hardware backend's support checks) and the per-image decode
// parameters of batched calls with regions, destroyed together.
struct nvjpeg_session {
  const nvjpeg_api* api = nullptr;
  nvjpegHandle_t handle = nullptr;
  std::vector<nvjpegJpegState_t> states;
  nvjpegJpegStream_t parsed = nullptr;
  std::vector<std::vector<nvjpegDecodeParams_t>> params;  // per state: one per image of its batch
  unsigned int flags = 0;  // what the handle was made with
  unsigned int refused = 0;   // the flags asked for that it was made without: nvjpegCreateEx refused them
  std::string flags_refused;  // nvjpegCreateEx's answers to those, for the log
  // Per state: nvjpegDecodeBatchedPreAllocate was called for it (once).
  std::vector<std::uint8_t> preallocated;
  // Where it was made: nvJPEG binds handles and states to the device current at their creation.
  c10::DeviceIndex device = -1;
  nvjpeg_session(const nvjpeg_api* a, nvjpegBackend_t backend, unsigned int wanted_flags, int state_count = 1)
      : api(a), device(c10::cuda::current_device()) {
    // The flags are independent bits: where the handle is refused with all of them, fewer are
    // tried, the diagnosis dropped first, then the interpolation, then both; so one refused flag
    // does not cost the run the other. `refused` holds what the handle was made without.
    const unsigned int diagnosis = NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE;
    const unsigned int interpolation = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
    nvjpegStatus_t made = NVJPEG_STATUS_NOT_INITIALIZED;
    std::vector<unsigned int> tried;
    for (const unsigned int set : {wanted_flags, wanted_flags & ~diagnosis, wanted_flags & ~interpolation,
                                   wanted_flags & ~(diagnosis | interpolation)}) {
      if (std::find(tried.begin(), tried.end(), set) != tried.end()) continue;
      tried.push_back(set);
      flags = set;
      made = api->create_ex(backend, nullptr, nullptr, flags, &handle);
      if (made == NVJPEG_STATUS_SUCCESS) break;
      flags_refused += (flags_refused.empty() ? "" : "; ") + std::string("flags ") + std::to_string(flags) + ": " +
                       status_text(made);
    }
    refused = made == NVJPEG_STATUS_SUCCESS ? wanted_flags & ~flags : 0;
    if (made != NVJPEG_STATUS_SUCCESS) {
      handle = nullptr;
      return;
    }
    // Padding is an optimisation: a libnvjpeg without it, or refusing it, decodes all the same.
    if (api->device_padding) (void)api->device_padding(device_padding_bytes, handle);
    if (api->pinned_padding) (void)api->pinned_padding(pinned_padding_bytes, handle);
    try {
      states.reserve(static_cast<std::size_t>(state_count));
      for (int k = 0; k < state_count; ++k) add_state();
      check(api->stream_create(handle, &parsed), "nvjpegJpegStreamCreate");
    } catch (...) {
      release();
      throw;
    }
  }
  ~nvjpeg_session() { release(); }
  nvjpegJpegState_t state(std::size_t k = 0) const { return states[k]; }
  void add_state() {
    nvjpegJpegState_t st = nullptr;
    check(api->state_create(handle, &st), "nvjpegJpegStateCreate");
    try {
      preallocated.reserve(states.size() + 1);
      states.push_back(st);
      preallocated.push_back(0);
    } catch (...) {
      api->state_destroy(st);
      throw;
    }
  }
  // State k preallocated for batches of `count` (nvjpegDecodeBatchedPreAllocate), once, before
  // its first batched call, as nvImageCodec's and DALI's hardware decoders do right after making
  // their state: it puts the engines' buffers in a pool, so nvJPEG does not free and allocate
  // them inside batched calls as image sizes change (NVIDIA documents that cost; a cudaFree waits
  // for the whole device). The frame size is a 1x1 hint, as theirs is by default: the pool grows
  // to the images met, and no hint sizes memory outside the caching allocator for the largest
  // file. `count` is the most images a batched call on it will take (NVIDIA: a value unlikely to be
  // exceeded). nvJPEG's status: where it refuses, its calls allocate as they need.
  nvjpegStatus_t preallocate(std::size_t k, int count) {
    if (preallocated[k]) return NVJPEG_STATUS_SUCCESS;
    const nvjpegStatus_t s = api->preallocate(handle, states[k], count, 1, 1, NVJPEG_CSS_444, NVJPEG_OUTPUT_RGBI);
    if (s == NVJPEG_STATUS_SUCCESS) preallocated[k] = 1;
    return s;
  }
  // At least `count` decode parameters for RGBI output for state k, made as the batch grows (a
  // handful per run). Each state has its own, untouched while its batch may be queued: nvJPEG
  // does not document when it has done reading them.
  void reserve_params(std::size_t k, std::size_t count) {
    if (params.size() <= k) params.resize(k + 1);
    std::vector<nvjpegDecodeParams_t>& mine = params[k];
    while (mine.size() < count) {
      nvjpegDecodeParams_t p = nullptr;
      check(api->params_create(handle, &p), "nvjpegDecodeParamsCreate");
      mine.push_back(p);
      check(api->params_set_format(p, NVJPEG_OUTPUT_RGBI), "nvjpegDecodeParamsSetOutputFormat");
    }
  }
  void release() {
    if (!handle) return;
    // On their own device, whatever is current when the owner goes (as event_pool's events).
    c10::cuda::CUDAGuard guard(device);
    for (const auto& mine : params)
      for (nvjpegDecodeParams_t p : mine) api->params_destroy(p);
    params.clear();
    if (parsed) api->stream_destroy(parsed);
    for (nvjpegJpegState_t st : states) api->state_destroy(st);
    states.clear();
    if (handle) api->destroy(handle);
    parsed = nullptr;
    handle = nullptr;
  }
  nvjpeg_session(const nvjpeg_session&) = delete;
  nvjpeg_session& operator=(const nvjpeg_session&) = delete;
  explicit operator bool() const { return handle != nullptr; }
};

// Device events made once, destroyed with their owner after it has waited for the device. Not
// at::cuda::CUDAEvent: the loader's workers wait on these while the training thread records them
// again, and cudaEventRecord and cudaEventSynchronize are safe to call so, the wrapper's fields not.
struct event_pool {
  std::vector<cudaEvent_t> events;
  c10::DeviceIndex device = -1;
  event_pool() = default;
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;
  ~event_pool() {
    if (events.empty()) return;
    // On their own device, as at::cuda::CUDAEvent destroys its event: no context made elsewhere.
    c10::cuda::CUDAGuard guard(device);
    for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
  }
  void make(std::size_t count) {  // on the current device
    device = c10::cuda::current_device();
    events.reserve(count);
    while (events.size() < count) {
      cudaEvent_t e = nullptr;
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events.push_back(e);
    }
  }
};

// Which decoder takes an image of the batch; `workers`: a loader worker decoded it already.
enum class route { hardware, general, host, workers };

// Adds the host time of its scope to a counter of device_decode_counts.
struct host_time {
  std::int64_t& into;
  std::int64_t begin = steady_now_ns();
  ~host_time() { into += steady_now_ns() - begin; }
};

class nvjpeg_transfer final : public transfer_stage, public copy_lane {
 public:
  nvjpeg_transfer(c10::Device device, const nvjpeg_options& o, const nvjpeg_api* api)
      : device_(device), options_(o), api_(api) {
    c10::cuda::CUDAGuard guard(device);
    if (o.copy_stream) side_ = c10::cuda::getStreamFromPool(false, device.index());
    depth_ = side_ ? 2 : 1;
    ready_.resize(static_cast<std::size_t>(depth_));
    free_.resize(static_cast<std::size_t>(depth_));
    read_events_.make(read_slots_.size());
    flags_ = handle_flags(api, o.interpolated_chroma);
    open_hardware();
    preallocate_ = hardware_ && api->preallocate;
    // Three states, made now: the batches two arenas let the host run ahead of the decode stream,
    // and one more; in a steady loop none is made later.
    if (hardware_) state_batch_.assign(hardware_->states.size(), -1);
    regions_ = hardware_ && o.regions && api->has_regions();
    if (hardware_ && !regions_)
      regions_why_ = o.regions ? "this libnvjpeg has no nvjpegDecodeBatchedEx" : "data.partial_decode: false";
    general_ = std::make_unique<nvjpeg_session>(api, NVJPEG_BACKEND_DEFAULT, flags_);
    if (!*general_) throw run_error("nvjpeg", "nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT) failed");
    warn_flags_refused();
    std::vector<float> scale, bias;
    for (std::size_t c = 0; c < 3; ++c) {
      scale.push_back(static_cast<float>(1.0 / (255.0 * o.std[c])));
      bias.push_back(static_cast<float>(-o.mean[c] / o.std[c]));
    }
    auto opts = at::TensorOptions().dtype(at::kFloat);
    scale_ = at::tensor(scale, opts).view({1, 3, 1, 1}).to(device);
    bias_ = at::tensor(bias, opts).view({1, 3, 1, 1}).to(device);
    norm_ = fused_normalizer(normalizer(o.mean, o.std));
    fused_ = o.fused_crop_for_tests ? fused_crop_holds(fused_why_) : false;
    if (!o.fused_crop_for_tests) fused_why_ = "the tests asked for the ATen ops";
    if (!fused_) log_warn("nvjpeg: the fused crop kernel is not used, each image is cropped by ATen ops: " + fused_why_);
  }

  // nvJPEG's engines may still be writing the pixel arena, and the model's stream may still read
  // the batch buffers (made on the decode stream, with no record_stream): wait for the whole
  // device before the sessions and the buffers go.
  ~nvjpeg_transfer() override {
    try {
      c10::cuda::CUDAGuard guard(device_);
      c10::cuda::device_synchronize();
    } catch (const std::exception& e) {
      log_warn(std::string("nvjpeg: waiting for the device at shutdown failed: ") + e.what());
    }
  }

  // The hardware engines are optional (most GPUs have none): a session that cannot be made,
  // whether nvjpegCreateEx refuses the backend or its state cannot be created, leaves every
  // image to the general backend.
  void open_hardware() {
    try {
      const unsigned int extra = engines_unpipelined() ? NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE : 0u;
      hardware_ = std::make_unique<nvjpeg_session>(api_, NVJPEG_BACKEND_HARDWARE, flags_ | extra, 3);
      if (!*hardware_) hardware_.reset();
    } catch (const std::exception& e) {
      hardware_.reset();
      log_info(std::string("nvjpeg: the hardware backend is not used: ") + e.what());
    }
  }

  int lookahead() const override { return side_ ? 1 : 0; }
  // The decode and its copies run on the side stream when there is one: the clock times h2d there.
  std::optional<c10::cuda::CUDAStream> stream() const override { return side_; }
  const device_decode_counts* decode_counts() const override { return &counts_; }

  std::string describe() const override {
    return std::string("nvJPEG (") + (hardware_ ? "hardware JPEG engines" : "GPU hybrid backend") + ", " + api_->path +
           "): batched decode" + region_text() + chroma_text() + ", then crop, resize, flip and normalise " +
           (fused_ ? "in one fused kernel per batch" : "by ATen ops per image (" + fused_why_ + ")") + " into " +
           crop_dtype_name(batch_dtype()) + " " +
           crop_layout_name(options_.channels_last ? crop_layout::nhwc : crop_layout::nchw) + " batches on " +
           (side_ ? "a side stream, one batch ahead" : "the compute stream") +
           (options_.off_engines_on_workers
                ? "; files the JPEG engines cannot take are decoded by the loader's workers (libjpeg-turbo, the "
                  "crop's region) and copied up"
                : "; files the JPEG engines cannot take go to nvJPEG's general backend on this thread") +
           shared_text() + ", files nvJPEG cannot decode are decoded on the host (libjpeg-turbo)";
  }

  void submit(const host_batch& batch, batch_loader& loader) override {
    TB_ASSERT(batch.encoded, "data.decode: device needs the loader's encoded batches");
    const encoded_batch& e = *batch.encoded;
    const std::int64_t n = batch.count;
    const std::size_t slot = static_cast<std::size_t>(submitted_++ % depth_);
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::CUDAStream stream = decode_stream();
    c10::cuda::CUDAStreamGuard stream_guard(stream);
    allocate(batch);
    if (!e.ring) ++counts_.pageable_batches;
    decode_all(e, n, stream, loader);
    at::Tensor out = images_[slot].narrow(0, 0, n);
    at::Tensor labels = labels_[slot].narrow(0, 0, n);
    {
      host_time t{counts_.crop_ns};
      labels.copy_(batch.labels.narrow(0, 0, n), true);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t from = source_[static_cast<std::size_t>(i)];
        if (from != i) labels[i].copy_(labels[from], true);
      }
      crop_batch(e, n, out, stream);
    }
    ready_[slot].record(stream);
    arenas_[turn_].read.record(stream);  // every read of this batch's arena is before it
    // The loader refills the slot's file bytes, and its file ring reuses their block, only after
    // the decode has read them: this batch's `read` event, recorded after every read of them
    // (read_fence_slots; the ring may run the fence batches later, when it needs the room).
    // One stream for every record: a later record proves an earlier batch only on the same stream.
    if (!fence_stream_) fence_stream_ = stream.stream();
    TB_ASSERT(fence_stream_ == stream.stream(), "nvjpeg: a batch's reads on another stream than the earlier batches'");
    const std::int64_t number = fenced_;
    C10_CUDA_CHECK(cudaEventRecord(read_events_.events[read_slots_.slot_for(number)], stream.stream()));
    ++fenced_;  // only once recorded: the numbers recorded run 0, 1, 2, ... with no gap
    read_slots_.recorded(number);
    if (batch_used_state_) state_batch_[batch_state_] = number;
    // Read index and count first: once released, a worker may refill the slot at once.
    pending_.push_back({slot, batch.index, n});
    loader.release(batch, read_fence{this, number});
  }

  device_batch take() override {
    const pending p = pending_.front();
    pending_.erase(pending_.begin());
    taken_ = p.slot;
    if (side_) ready_[p.slot].block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return {images_[p.slot].narrow(0, 0, p.count), labels_[p.slot].narrow(0, 0, p.count), p.index, p.count};
  }

  void step_done() override {
    if (!side_) return;
    // The next submit reuses this batch's buffers (two slots, lookahead 1): the side stream waits
    // for the step here, before the runner records that submit's timing event, so the decode's
    // time holds decoding only.
    free_[taken_].record(c10::cuda::getCurrentCUDAStream(device_.index()));
    free_[taken_].block(*side_);
  }

 private:
  struct pending {
    std::size_t slot;
    std::int64_t index, count;
  };

  // The loader's fence for a batch's file bytes: a pointer and a number, which std::function keeps
  // in place (no allocation per batch). The loader is destroyed before this stage (pipeline.hpp's
  // order; the tests keep it), so the pointer outlives every fence the loader may run.
  struct read_fence {
    const nvjpeg_transfer* stage;
    std::int64_t batch;
    void operator()() const { stage->wait_read(batch); }
  };

  // Blocks until batch b's reads of its file bytes have run (any thread).
  void wait_read(std::int64_t b) const {
    C10_CUDA_CHECK(cudaEventSynchronize(read_events_.events[read_slots_.proof(b)]));
  }

  // Whether they have, without waiting (as at::cuda::CUDAEvent::query: "not ready" is no error).
  bool read_done(std::int64_t b) const {
    const cudaError_t e = cudaEventQuery(read_events_.events[read_slots_.proof(b)]);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    C10_CUDA_CHECK(e);
    return true;
  }

  c10::cuda::CUDAStream decode_stream() const {
    return side_ ? *side_ : c10::cuda::getCurrentCUDAStream(device_.index());
  }

  void allocate(const host_batch& batch) {
    if (!images_.empty()) return;
    const std::int64_t b = batch.labels.size(0), s = options_.image_size;
    auto opts = at::TensorOptions().device(device_);
    const auto format = options_.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    for (int k = 0; k < depth_; ++k) {
      images_.push_back(at::empty({b, 3, s, s}, opts.dtype(options_.dtype), format));
      labels_.push_back(at::empty({b}, opts.dtype(at::kLong)));
    }
    // A job table per batch whose crops may be in flight (this one and the last: the host waits for
    // the one before before the engines start) and one more, made now: the launches allocate
    // nothing later.
    if (fused_) crop_kernel_.reserve(static_cast<int>(b), 3);
  }

  // The arena of the batch being submitted (place() turns to it).
  const at::Tensor& arena() const { return arenas_[turn_].bytes; }

  // Each image of the batch gets its own region of one arena (the hardware engines may write
  // them in any order). Two arenas, used in turn: the engines write one while the crops of the
  // batch before may still read the other (wait_for_arena_readers). A replaced arena goes back to
  // the caching allocator on the decode stream, so stream-ordered work cannot get it while this
  // work may still touch it; the engines' writes are not stream-ordered, hence arenas_fresh_.
  void place(const encoded_batch& e, std::int64_t n) {
    image_bytes_.clear();  // keeps its capacity, as every per-batch vector of this stage
    for (std::int64_t i = 0; i < n; ++i) {
      const jpeg_info& info = e.infos[static_cast<std::size_t>(i)];
      const plan_region& r = e.decoded[static_cast<std::size_t>(i)];
      image_bytes_.push_back(r.width > 0 ? static_cast<std::int64_t>(r.width) * r.height * 3
                                         : static_cast<std::int64_t>(info.width) * info.height * 3);
    }
    layout_arena(image_bytes_, layout_);
    turn_ = 1 - turn_;
    // One size for both, from every batch: both are replaced together, so the host waits for the
    // stream once per size, not once per arena.
    const std::int64_t held = arenas_[0].bytes.defined() ? arenas_[0].bytes.numel() : 0;
    std::int64_t capacity = sizer_.capacity_for(layout_.total, held);
    // Grown a quarter beyond the need: each new size costs the host a wait for the decode stream.
    if (capacity > held) capacity += capacity / 4;
    if (capacity != held) {
      for (pixel_arena& a : arenas_) a.bytes = at::Tensor();  // the old ones go back first
      const auto bytes = at::TensorOptions().device(device_).dtype(at::kByte);
      for (pixel_arena& a : arenas_) a.bytes = at::empty({capacity}, bytes);
      arenas_fresh_ = true;
    }
    counts_.bytes_held = 2 * capacity;
    counts_.peak_bytes_held = std::max(counts_.peak_bytes_held, counts_.bytes_held);
    outputs_.assign(static_cast<std::size_t>(n), nvjpegImage_t{});
    decoded_.resize(static_cast<std::size_t>(n));
    std::uint8_t* base = arena().data_ptr<std::uint8_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      const jpeg_info& info = e.infos[static_cast<std::size_t>(i)];
      auto& o = outputs_[static_cast<std::size_t>(i)];
      o.channel[0] = base + layout_.offsets[static_cast<std::size_t>(i)];
      o.pitch[0] = static_cast<std::size_t>(info.width) * 3;
      // A worker's region, or the whole image until the engines decode a region.
      const plan_region& r = e.decoded[static_cast<std::size_t>(i)];
      decoded_[static_cast<std::size_t>(i)] = r.width > 0 ? r : plan_region{0, 0, info.width, info.height};
    }
  }

  void decode_all(const encoded_batch& e, std::int64_t n, c10::cuda::CUDAStream stream, batch_loader& loader) {
    std::vector<route>& routes = routes_;
    routes.resize(static_cast<std::size_t>(n));
    {
      host_time t{counts_.route_ns};
      place(e, n);
      for (std::int64_t i = 0; i < n; ++i) routes[static_cast<std::size_t>(i)] = route_of(e, i, loader);
    }
    {
      host_time t{counts_.fallback_ns};
      for (std::int64_t i = 0; i < n; ++i)
        if (routes[static_cast<std::size_t>(i)] == route::workers) copy_up(e, i);
    }
    {
      host_time t{counts_.hardware_ns};
      batch_used_state_ = false;
      decode_hardware(e, routes, stream, loader);
    }
    {
      host_time t{counts_.cuda_ns};
      for (std::int64_t i = 0; i < n; ++i)
        if (routes[static_cast<std::size_t>(i)] == route::general) decode_general(e, i, routes, stream, loader);
    }
    host_time t{counts_.fallback_ns};
    source_.resize(static_cast<std::size_t>(n));
    bad_.assign(static_cast<std::size_t>(n), 0);
    for (std::int64_t i = 0; i < n; ++i) {
      source_[static_cast<std::size_t>(i)] = i;
      if (routes[static_cast<std::size_t>(i)] == route::host) bad_[static_cast<std::size_t>(i)] = !decode_host(e, i, loader);
    }
    replace_bad(e, bad_, loader);
  }

  // A worker's pixels (its crop's region, packed RGB) into the image's place in the arena, on the
  // decode stream (the current one), before the batch's `read` event like every other read of its
  // bytes. From the pinned file ring the copy is asynchronous. A batch outside the ring (pageable)
  // is staged through pinned memory, as decode_host does: from pageable memory the runtime may
  // wait for the stream, which on the side stream waits for the previous step.
  void copy_up(const encoded_batch& e, std::int64_t i) {
    const std::size_t k = static_cast<std::size_t>(i);
    if (e.ring) {
      C10_CUDA_CHECK(cudaMemcpyAsync(arena().data_ptr<std::uint8_t>() + layout_.offsets[k], e.data() + e.offsets[k],
                                     e.sizes[k], cudaMemcpyHostToDevice,
                                     c10::cuda::getCurrentCUDAStream(device_.index()).stream()));
    } else {
      // The caching host allocator keeps the pinned block until the copy has run.
      const auto bytes = static_cast<std::int64_t>(e.sizes[k]);
      at::Tensor staged = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      std::memcpy(staged.data_ptr(), e.data() + e.offsets[k], e.sizes[k]);
      arena().narrow(0, layout_.offsets[k], bytes).copy_(staged, true);
    }
    ++counts_.images_workers;
  }

  // choose_backend (stages/device_decode.cpp) from the markers the worker read: what nvJPEG
  // cannot decode as the host does goes to the host before nvJPEG sees it; baseline files go to
  // the hardware engines if nvjpegDecodeBatchedSupported accepts them too (the subsamplings and
  // sizes this GPU's engines handle); the rest goes to the general backend.
  route route_of(const encoded_batch& e, std::int64_t i, batch_loader& loader) {
    if (e.decoded[static_cast<std::size_t>(i)].width > 0) return route::workers;
    const unsigned char* data = e.data() + e.offsets[static_cast<std::size_t>(i)];
    const std::size_t size = e.sizes[static_cast<std::size_t>(i)];
    const decode_backend first = choose_backend(e.markers[static_cast<std::size_t>(i)], hardware_ != nullptr);
    if (first == decode_backend::host) return route::host;
    if (first == decode_backend::cuda) return route::general;
    // The engines' verdict on a file is its bytes': parsed once per file, kept for later epochs.
    const auto file = static_cast<std::size_t>(e.indices[static_cast<std::size_t>(i)]);
    if (file < engines_take_.size() && engines_take_[file] != 0)
      return engines_take_[file] == 1 ? route::hardware : route::general;
    const nvjpegStatus_t parsed = api_->stream_parse(hardware_->handle, data, size, 0, 0, hardware_->parsed);
    route r = route::general;  // a file it cannot parse: the general backend parses on its own, then the host
    if (parsed != NVJPEG_STATUS_SUCCESS) {
      (void)usable(parsed, "nvjpegJpegStreamParse", e, i);  // throws on a fatal status
    } else {
      int unsupported = 1;
      check(api_->batched_supported(hardware_->handle, hardware_->parsed, &unsupported),
            "nvjpegDecodeBatchedSupported");
      if (unsupported == 0) r = route::hardware;
    }
    if (file >= engines_take_.size()) engines_take_.resize(file + 1, 0);
    engines_take_[file] = r == route::hardware ? 1 : 2;
    if (r != route::hardware) move_to_workers(e, i, loader);
    return r;
  }

  // data.decode_off_engines: host: a file the markers sent to the engines but that nvJPEG refused
  // at run time is decoded by the loader's workers from its next read on, rather than here on the
  // training thread every epoch; this time it still goes the device's way.
  void move_to_workers(const encoded_batch& e, std::int64_t i, batch_loader& loader) {
    if (!loader.decode_on_workers(e.indices[static_cast<std::size_t>(i)]) || moved_logged_) return;
    moved_logged_ = true;
    log_info("nvjpeg: " + file_name(e, i, loader) +
             ": refused by the JPEG engines or nvJPEG though its markers allow them; the loader's workers decode such "
             "files from their next read on (data.decode_off_engines: host)");
  }

  // A status that says this file cannot be decoded here is false (the file goes elsewhere); a
  // fatal one is a run error.
  bool usable(nvjpegStatus_t s, const char* call, const encoded_batch& e, std::int64_t i) const {
    switch (classify_nvjpeg_status(static_cast<int>(s))) {
      case nvjpeg_outcome::decoded:
        return true;
      case nvjpeg_outcome::cannot_decode:
        return false;
      case nvjpeg_outcome::fatal:
        break;
    }
    throw run_error("nvjpeg", std::string(call) + " failed: " + status_text(s) + " on sample " +
                                  std::to_string(e.indices[static_cast<std::size_t>(i)]) + " of the image folder");
  }

  // The hardware images in one batched call on a state no queued work still uses (take_state):
  // each image's crop region only where this libnvjpeg has nvjpegDecodeBatchedEx and the engines
  // take the region (nvjpegDecodeBatchedSupportedEx, per image), else whole. The state is
  // initialised before each call, as NVIDIA's own hardware decoders do. A batch refused with
  // regions is decoded again whole, and regions are not asked for again in this run unless a file
  // the engines refuse whole too explains it. A batch refused whole is split until the files the
  // engines refuse are found (decode_refused).
  void decode_hardware(const encoded_batch& e, std::vector<route>& routes, c10::cuda::CUDAStream stream,
                       batch_loader& loader) {
    std::vector<std::int64_t>& members = members_;
    members.clear();
    for (std::size_t i = 0; i < routes.size(); ++i)
      if (routes[i] == route::hardware) members.push_back(static_cast<std::int64_t>(i));
    if (members.empty()) return;
    std::vector<const unsigned char*>& data = member_data_;
    std::vector<std::size_t>& lengths = member_lengths_;
    data.clear();
    lengths.clear();
    for (std::int64_t i : members) {
      data.push_back(e.data() + e.offsets[static_cast<std::size_t>(i)]);
      lengths.push_back(e.sizes[static_cast<std::size_t>(i)]);
      spoil_for_tests(e, i, data.back(), lengths.back());
    }
    const int count = static_cast<int>(members.size());
    batch_state_ = take_state();
    batch_used_state_ = true;
    if (preallocate_) preallocate_state(static_cast<int>(routes.size()));  // every image of the batch at most
    const bool with_regions = regions_ && reserve_params(members.size());
    // Host work only, so before the wait: the engines may still be decoding the batch before.
    const std::int64_t smaller = with_regions ? ask_regions(e, members) : 0;
    wait_for_arena_readers(stream);
    std::string refused;  // this batch's refusal with regions
    if (with_regions) {
      const nvjpegStatus_t s = decode_regions(e, members, data, lengths, stream);
      if (s == NVJPEG_STATUS_SUCCESS) {
        counts_.images_device += count;
        counts_.images_hardware += count;
        counts_.images_region += smaller;
        return;
      }
      for (std::int64_t i : members) {
        const jpeg_info& info = e.infos[static_cast<std::size_t>(i)];
        decoded_[static_cast<std::size_t>(i)] = {0, 0, info.width, info.height};
      }
      refused = "nvjpegDecodeBatchedEx refused a batch with regions: " + status_text(s);
      // Whatever the failed call queued is done before the state is initialised again.
      stream.synchronize();
    }
    std::vector<nvjpegImage_t>& outputs = member_outputs_;
    outputs.clear();
    for (std::int64_t i : members) outputs.push_back(outputs_[static_cast<std::size_t>(i)]);
    const nvjpegStatus_t s = decode_whole(e, 0, members.size(), stream);
    const bool taken = taken_whole(s, "nvjpegDecodeBatched (hardware)", count);
    const std::size_t found = taken ? 0 : decode_refused(e, routes, stream, loader);
    // A refusal with regions that no file explains turns them off: asking again would cost every
    // later batch holding such a file a stream synchronisation. One a file explains (refused whole
    // too, and now off the engines) leaves them on.
    if (!refused.empty() && found == 0) regions_off(refused);
  }

  // The JPEG engines' writes did not wait for work queued earlier on their stream in torchcodec's
  // measurements (H100, nvJPEG 12.3 to 13.2; of the barriers tried only a host wait held), though
  // NVIDIA documents stream order. So before the engines write this batch's arena the host waits
  // for the last work that read it: the crops of the batch before the last (the arenas alternate),
  // so the engines can start on this batch while the crops of the last one still queue. A new
  // arena may be a block the caching allocator took back on this stream with work still queued on
  // it (without a side stream, the step's own tensors): then the host waits for the whole stream,
  // once per new pair. It blocks only where the host runs further ahead of the decode stream than
  // two arenas allow, or after new arenas (arena_waits counts both); the time is host_wait_s, a
  // part of submit_host_s.hardware.
  void wait_for_arena_readers(c10::cuda::CUDAStream stream) {
    pixel_arena& a = arenas_[turn_];
    if (arenas_fresh_) {
      arenas_fresh_ = false;
      if (stream.query()) return;
      ++counts_.arena_waits;
      host_time t{counts_.wait_ns};
      stream.synchronize();
      return;
    }
    if (a.read.query()) return;
    ++counts_.arena_waits;
    host_time t{counts_.wait_ns};
    a.read.synchronize();
  }

  // One batched call of the engines on the hardware images members_[first, first + count), whole,
  // on this batch's state, initialised first.
  nvjpegStatus_t decode_whole(const encoded_batch& e, std::size_t first, std::size_t count,
                              c10::cuda::CUDAStream stream) {
    if (refused_for_tests(e, first, count)) return NVJPEG_STATUS_JPEG_NOT_SUPPORTED;
    nvjpegJpegState_t state = hardware_->state(batch_state_);
    check(api_->batched_init(hardware_->handle, state, static_cast<int>(count), 1, NVJPEG_OUTPUT_RGBI),
          "nvjpegDecodeBatchedInitialize");
    return api_->batched(hardware_->handle, state, member_data_.data() + first, member_lengths_.data() + first,
                         member_outputs_.data() + first, stream.stream());
  }

  // The state this batch's call takes, preallocated on its first batch (nvjpeg_session::
  // preallocate) for the batch's size, the most its calls take. Where nvJPEG turns the call down
  // (a parameter or backend it does not take), the run goes on without; an allocation or the
  // device failing is a run error, as in every call. Not classify_nvjpeg_status: that table is for
  // a decode call's statuses, and this call reads no file.
  void preallocate_state(int batch_images) {
    const nvjpegStatus_t s = hardware_->preallocate(batch_state_, batch_images);
    if (s == NVJPEG_STATUS_SUCCESS) return;
    if (s == NVJPEG_STATUS_ALLOCATOR_FAILURE || s == NVJPEG_STATUS_EXECUTION_FAILED ||
        s == NVJPEG_STATUS_INTERNAL_ERROR)
      throw run_error("nvjpeg", "nvjpegDecodeBatchedPreAllocate failed: " + status_text(s));
    preallocate_ = false;
    log_info("nvjpeg: nvjpegDecodeBatchedPreAllocate refused a batch of " + std::to_string(batch_images) + " (" +
             status_text(s) + "); the engines' calls make their own buffers as they need");
  }

  // Whether the engines took a whole-image call of `count` images (counted), or refused it
  // (counted); a fatal status is a run error.
  bool taken_whole(nvjpegStatus_t s, const char* call, std::int64_t count) {
    if (s == NVJPEG_STATUS_SUCCESS) {
      counts_.images_device += count;
      counts_.images_hardware += count;
      return true;
    }
    if (classify_nvjpeg_status(static_cast<int>(s)) == nvjpeg_outcome::fatal)
      throw run_error("nvjpeg", std::string(call) + " failed: " + status_text(s));
    ++counts_.hardware_refusals;
    return false;
  }

  // nvJPEG refused a whole-image batch though its own check (nvjpegDecodeBatchedSupported) took
  // every file of it; the status does not say which. isolate_refused (stages/device_decode.hpp)
  // splits the batch until the refused files are found: the engines decode the rest, the general
  // backend takes those now, and they leave the engines for the rest of the run (engines_take_),
  // so one such file costs this once, not every batch that holds it, every epoch. Each call waits
  // for the one before, failed or not: they share the batch's state, nvJPEG documents no reuse
  // of a state whose work may be queued, and the engines do not wait for the stream. A search that
  // finds no file (a refusal of the batch, not of a file) is given up after three: from then on a
  // refused batch goes to the general backend image by image. The files found.
  std::size_t decode_refused(const encoded_batch& e, std::vector<route>& routes, c10::cuda::CUDAStream stream,
                             batch_loader& loader) {
    if (fruitless_searches_ >= max_fruitless_searches) {
      for (std::int64_t i : members_) routes[static_cast<std::size_t>(i)] = route::general;
      return 0;
    }
    const auto decode = [&](std::size_t first, std::size_t count) {
      stream.synchronize();
      return taken_whole(decode_whole(e, first, count, stream), "nvjpegDecodeBatched (hardware, part of a batch)",
                         static_cast<std::int64_t>(count));
    };
    std::vector<std::size_t>& refused = refused_members_;
    refused.clear();
    isolate_refused(0, members_.size(), decode, refused);
    for (std::size_t k : refused) {
      const std::int64_t i = members_[k];
      routes[static_cast<std::size_t>(i)] = route::general;
      const auto file = static_cast<std::size_t>(e.indices[static_cast<std::size_t>(i)]);
      if (file >= engines_take_.size()) engines_take_.resize(file + 1, 0);
      engines_take_[file] = 2;
      ++counts_.hardware_refused_files;
      move_to_workers(e, i, loader);
    }
    if (refused.empty() && ++fruitless_searches_ == max_fruitless_searches)
      log_warn("nvjpeg: the JPEG engines refused whole batches that no file of them explains, " +
               std::to_string(max_fruitless_searches) +
               " times: such batches go to the general backend image by image from now on "
               "(results.device_decode.hardware_refusals)");
    if (!refused.empty() && !refusal_logged_) {
      refusal_logged_ = true;
      log_warn("nvjpeg: " + file_name(e, members_[refused.front()], loader) +
               ": the JPEG engines refused it in a batched call though their check took it; it goes to the general "
               "backend from now on, as any other such file (counted in results.device_decode.hardware_refused_files; "
               "logged once)");
    }
    return refused.size();
  }

  // Tests only (nvjpeg_options::refuse_on_engines_for_tests): a call holding that file is refused
  // with nvJPEG's status for it, without calling nvJPEG...
  bool refused_for_tests(const encoded_batch& e, std::size_t first, std::size_t count) const {
    if (options_.refuse_on_engines_for_tests < 0 || options_.refuse_by_spoiling_for_tests) return false;
    for (std::size_t k = first; k < first + count; ++k)
      if (e.indices[static_cast<std::size_t>(members_[k])] == options_.refuse_on_engines_for_tests) return true;
    return false;
  }

  // ...or the engines get a stream with no frame (SOI, EOI) in place of its bytes, and nvJPEG
  // refuses the call itself. The general backend still reads the file's own bytes.
  void spoil_for_tests(const encoded_batch& e, std::int64_t i, const unsigned char*& data, std::size_t& length) const {
    static constexpr unsigned char no_frame[] = {0xFF, 0xD8, 0xFF, 0xD9};
    if (!options_.refuse_by_spoiling_for_tests ||
        e.indices[static_cast<std::size_t>(i)] != options_.refuse_on_engines_for_tests)
      return;
    data = no_frame;
    length = sizeof no_frame;
  }

  void regions_off(const std::string& why) {
    regions_ = false;
    regions_why_ = why;
    log_warn("nvjpeg: the JPEG engines decode whole images from here on: " + why);
  }

  // A hardware state that no queued work still uses: nvJPEG documents no reuse of a state whose
  // work may still be queued (nvImageCodec waits for its previous batch before initialising its
  // state again, DALI before its decode call). A state is free once the `read` event of the batch
  // it last took has fired (queried, not waited for); when none is, another is made, up to
  // max_states, and only then does submit wait, for the state used longest ago.
  std::size_t take_state() {
    std::size_t oldest = 0;
    for (std::size_t k = 0; k < state_batch_.size(); ++k) {
      if (state_batch_[k] < 0 || read_done(state_batch_[k])) return k;
      if (state_batch_[k] < state_batch_[oldest]) oldest = k;
    }
    if (state_batch_.size() < max_states) {
      try {
        hardware_->add_state();
        state_batch_.push_back(-1);
        return state_batch_.size() - 1;
      } catch (const run_error& e) {
        log_warn(std::string("nvjpeg: no further decode state, waiting for one instead: ") + e.what());
      }
    }
    {
      host_time t{counts_.wait_ns};
      wait_read(state_batch_[oldest]);
    }
    ++counts_.state_waits;
    return oldest;
  }

  // Decode parameters for `count` images; false, and regions off for the run, where nvJPEG
  // cannot make them (regions are an optimisation: the batch is then decoded whole).
  bool reserve_params(std::size_t count) {
    try {
      hardware_->reserve_params(batch_state_, count);
      return true;
    } catch (const std::exception& e) {
      regions_off(e.what());
      return false;
    }
  }

  // The region image i's plan needs, as the engines' decode parameters k; the whole image is
  // asked for where nvJPEG refuses the region or the engines cannot decode it. True where the
  // region is smaller than the file.
  bool ask_region(const encoded_batch& e, std::int64_t i, std::size_t k) {
    const jpeg_info& info = e.infos[static_cast<std::size_t>(i)];
    const plan_region r = region_of(e.plans[static_cast<std::size_t>(i)], info.width, info.height);
    nvjpegDecodeParams_t params = hardware_->params[batch_state_][k];
    bool ok = api_->params_set_roi(params, r.x0, r.y0, r.width, r.height) == NVJPEG_STATUS_SUCCESS;
    if (ok) {
      const unsigned char* data = e.data() + e.offsets[static_cast<std::size_t>(i)];
      int unsupported = 1;
      ok = api_->parse_header(hardware_->handle, data, e.sizes[static_cast<std::size_t>(i)], hardware_->parsed) ==
               NVJPEG_STATUS_SUCCESS &&
           api_->batched_supported_ex(hardware_->handle, hardware_->parsed, params, &unsupported) ==
               NVJPEG_STATUS_SUCCESS &&
           unsupported == 0;
    }
    if (ok) {
      decoded_[static_cast<std::size_t>(i)] = r;
      return static_cast<std::int64_t>(r.width) * r.height < static_cast<std::int64_t>(info.width) * info.height;
    }
    check(api_->params_set_roi(params, 0, 0, -1, -1), "nvjpegDecodeParamsSetROI");
    decoded_[static_cast<std::size_t>(i)] = {0, 0, info.width, info.height};
    return false;
  }

  // Each hardware image's region of interest (ask_region) into its decode parameters, and its
  // output written densely (pitch: the region's width) at the start of the image's arena region;
  // decoded_ holds what each image's pixels are. The images decoded smaller than their file.
  std::int64_t ask_regions(const encoded_batch& e, const std::vector<std::int64_t>& members) {
    std::vector<nvjpegImage_t>& outputs = member_outputs_;
    outputs.clear();
    std::int64_t smaller = 0;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const std::size_t i = static_cast<std::size_t>(members[k]);
      smaller += ask_region(e, members[k], k) ? 1 : 0;
      nvjpegImage_t o = outputs_[i];
      o.pitch[0] = static_cast<std::size_t>(decoded_[i].width) * 3;
      outputs.push_back(o);
    }
    return smaller;
  }

  // nvjpegDecodeBatchedEx with the regions ask_regions set. The status is returned, a fatal one
  // too: the caller decodes the batch again whole, and that call's status decides.
  nvjpegStatus_t decode_regions(const encoded_batch& e, const std::vector<std::int64_t>& members,
                                const std::vector<const unsigned char*>& data, const std::vector<std::size_t>& lengths,
                                c10::cuda::CUDAStream stream) {
    if (refused_for_tests(e, 0, members.size())) return NVJPEG_STATUS_JPEG_NOT_SUPPORTED;
    nvjpegJpegState_t state = hardware_->state(batch_state_);
    const int count = static_cast<int>(members.size());
    const nvjpegStatus_t init = api_->batched_init(hardware_->handle, state, count, 1, NVJPEG_OUTPUT_RGBI);
    if (init != NVJPEG_STATUS_SUCCESS) return init;
    return api_->batched_ex(hardware_->handle, state, data.data(), lengths.data(), member_outputs_.data(),
                            hardware_->params[batch_state_].data(), stream.stream());
  }

  // nvjpegCreateEx may refuse a flag that this libnvjpeg's version has (handle_flags); the
  // handle is then made without it, and the pixels differ from the host path's.
  void warn_flags_refused() const {
    for (const nvjpeg_session* session : {hardware_.get(), general_.get()}) {
      if (!session) continue;
      if ((session->refused & NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION) != 0)
        log_warn("nvjpeg: chroma is upsampled by repetition, unlike the host path's interpolation, along colour "
                 "edges of 4:2:0 and 4:2:2 files: nvjpegCreateEx refused " +
                 session->flags_refused);
      if ((session->refused & NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE) != 0)
        log_warn("nvjpeg: TRAINBENCH_NVJPEG_HW_NO_PIPELINE is not in effect, the engines stay pipelined: "
                 "nvjpegCreateEx refused " +
                 session->flags_refused);
    }
  }

  // What each handle was made with: the engines' and the general backend's may differ where
  // nvjpegCreateEx refused the flag for one of them.
  std::string chroma_text() const {
    const auto of = [this](const nvjpeg_session& session) -> std::string {
      if ((session.flags & NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION) != 0)
        return "chroma interpolated as libjpeg-turbo does";
      if ((session.refused & NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION) != 0)
        return "chroma repeated (nvjpegCreateEx refused interpolation)";
      if (!options_.interpolated_chroma) return "chroma repeated (interpolation off)";
      return "chroma repeated (this libnvjpeg has no interpolation)";
    };
    const std::string general = of(*general_);
    const std::string unpipelined =
        hardware_ && (hardware_->flags & NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE) != 0
            ? ", the engines unpipelined (TRAINBENCH_NVJPEG_HW_NO_PIPELINE)"
            : "";
    if (!hardware_ || of(*hardware_) == general) return ", " + general + unpipelined;
    return ", the engines' " + of(*hardware_) + ", the general backend's " + general + unpipelined;
  }

  // data.device_decode_share below 1: the share of each batch the workers decode besides.
  std::string shared_text() const {
    if (!options_.off_engines_on_workers || options_.device_share >= 1) return "";
    char share[32];
    std::snprintf(share, sizeof share, "%g", options_.device_share);
    return std::string("; data.device_decode_share ") + share +
           ": the loader's workers decode the rest of each batch too, positions spread through it";
  }
  std::string region_text() const {
    if (!hardware_) return "";
    return regions_ ? " (the engines decode each crop's region only)" : " (whole images: " + regions_why_ + ")";
  }

  void decode_general(const encoded_batch& e, std::int64_t i, std::vector<route>& routes, c10::cuda::CUDAStream stream,
                      batch_loader& loader) {
    const nvjpegStatus_t s = api_->decode(general_->handle, general_->state(),
                                          e.data() + e.offsets[static_cast<std::size_t>(i)],
                                          e.sizes[static_cast<std::size_t>(i)], NVJPEG_OUTPUT_RGBI,
                                          &outputs_[static_cast<std::size_t>(i)], stream.stream());
    if (usable(s, "nvjpegDecode", e, i)) {
      ++counts_.images_device;
      ++counts_.images_cuda;
    } else {
      routes[static_cast<std::size_t>(i)] = route::host;
      move_to_workers(e, i, loader);
    }
  }

  // libjpeg-turbo decodes the whole file into pinned memory; the copy into the image's region is
  // enqueued on the decode stream (ordered after any device write a failed attempt left there),
  // and the caching host allocator keeps the pinned block until that copy has run. False for a
  // file libjpeg-turbo cannot decode either.
  bool decode_host(const encoded_batch& e, std::int64_t i, batch_loader& loader) {
    const jpeg_info& planned = e.infos[static_cast<std::size_t>(i)];
    try {
      const jpeg_info info = host_.open(e.data() + e.offsets[static_cast<std::size_t>(i)],
                                        e.sizes[static_cast<std::size_t>(i)], options_.max_image_pixels);
      if (info.width != planned.width || info.height != planned.height)
        throw bad_image("its size changed between the header check and the decode");
      const decoded_pixels px = host_.decode({1, 0, info.width, 0, info.height});
      if (px.x0 != 0 || px.width != info.width || px.rows != info.height)
        throw bad_image("libjpeg-turbo returned other pixels than the header gives");
      const std::int64_t bytes = static_cast<std::int64_t>(info.width) * info.height * 3;
      at::Tensor staged = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      packed_rgb(px, staged.data_ptr<std::uint8_t>());
      arena().narrow(0, layout_.offsets[static_cast<std::size_t>(i)], bytes).copy_(staged, true);
      ++counts_.host_fallbacks;
      return true;
    } catch (const bad_image& bad) {
      const std::string name = file_name(e, i, loader);
      if (!options_.skip_bad_files)
        throw input_error(name + ": " + bad.what() + " (data.on_bad_file: skip would skip such files)");
      log_warn(name + ": " + bad.what() + "; skipped (data.on_bad_file: skip)");
      return false;
    }
  }

  static std::string file_name(const encoded_batch& e, std::int64_t i, const batch_loader& loader) {
    const std::int64_t index = e.indices[static_cast<std::size_t>(i)];
    if (const file_list* files = loader.files()) return files->path(index);
    return "sample " + std::to_string(index) + " of the image folder";
  }

  // data.on_bad_file: skip: a file neither decoder can read takes the next good sample of the
  // batch (its pixels, crop and label), as the reader replaces a bad file by the next good one.
  void replace_bad(const encoded_batch& e, const std::vector<char>& bad, batch_loader& loader) {
    const std::int64_t n = static_cast<std::int64_t>(bad.size());
    for (std::int64_t i = 0; i < n; ++i) {
      if (!bad[static_cast<std::size_t>(i)]) continue;
      std::int64_t j = 1;
      while (j < n && bad[static_cast<std::size_t>((i + j) % n)]) ++j;
      if (j == n)
        throw input_error(file_name(e, i, loader) +
                          ": no file of its batch could be decoded (data.on_bad_file: skip has nothing to take its place)");
      source_[static_cast<std::size_t>(i)] = (i + j) % n;
      ++counts_.replaced_samples;
    }
  }

  // The decoded images (arena(), image k's RGB rows at layout_.offsets[k], e.infos[k] in size)
  // into the batch `out` ([n, 3, S, S] float, channels_last when asked): position i takes image
  // source_[i] through its plan e.plans[source_[i]] (crop box, resize, flip), then mean/std, all
  // on the decode stream: one launch of the fused kernel (cuda/fused_crop.hpp, the host path's
  // arithmetic), or, where its check at construction failed, the per-image ATen ops.
  void crop_batch(const encoded_batch& e, std::int64_t n, at::Tensor out, c10::cuda::CUDAStream stream) {
    if (fused_) {
      fill_jobs(e, n);
      if (fused_crop_launcher::fits(jobs_.data(), static_cast<int>(n))) {
        crop_kernel_.launch(jobs_.data(), static_cast<int>(n), batch_output(out), norm_, stream.stream());
        return;
      }
      if (batches_too_shrunk_++ == 0)
        log_warn("nvjpeg: an image of batch " + std::to_string(submitted_ - 1) +
                 " shrinks by more than the fused crop kernel's filters hold (about 150x); such batches are cropped "
                 "by ATen ops per image");
    }
    for (std::int64_t i = 0; i < n; ++i) crop_resize(e, source_[static_cast<std::size_t>(i)], out[i]);
  }

  // The kernel's job i: image source_[i]'s decoded pixels in the arena (whole, or its region) and its plan.
  void fill_jobs(const encoded_batch& e, std::int64_t n) {
    jobs_.resize(static_cast<std::size_t>(n));  // keeps its capacity: no allocation after the first batch
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t from = static_cast<std::size_t>(source_[static_cast<std::size_t>(i)]);
      const plan_region& r = decoded_[from];
      fused_crop_job& job = jobs_[static_cast<std::size_t>(i)];
      job.pixels = arena().data_ptr<std::uint8_t>() + layout_.offsets[from];
      job.pitch = static_cast<std::int64_t>(r.width) * 3;
      job.width = r.width;
      job.height = r.height;
      job.channels = 3;
      job.plan = fused_plan(e.plans[from], r.x0, r.y0, r.width, r.height);
    }
  }

  crop_dtype batch_dtype() const {
    switch (options_.dtype) {
      case at::kHalf:
        return crop_dtype::float16;
      case at::kBFloat16:
        return crop_dtype::bfloat16;
      default:
        return crop_dtype::float32;
    }
  }

  // The batch tensor as the kernel's output: float32, fp16 or bf16 (options_.dtype), NCHW or NHWC
  // (channels_last), slot i at element i * 3 * S * S.
  fused_crop_output batch_output(const at::Tensor& out) const {
    TB_ASSERT(out.scalar_type() == options_.dtype, "nvjpeg: a batch buffer of another dtype than the decode's");
    return output_as(out, batch_dtype());
  }

  // A [n, 3, S, S] tensor of `dtype` as the kernel's output, in the batches' layout.
  fused_crop_output output_as(const at::Tensor& t, crop_dtype dtype) const {
    const int s = options_.image_size;
    return {t.data_ptr(), 3LL * s * s, s, options_.channels_last ? crop_layout::nhwc : crop_layout::nchw, dtype};
  }

  // Before the first batch: the kernel crops a made-up image (odd sizes; a train crop shrunk with
  // flip, one enlarged, an eval resize) on this device and must give the host path's floats
  // (data/fused_crop.hpp's reference, which equals crop_resampler bit for bit) within 1e-5; into a
  // half batch it must then store exactly those device floats rounded to nearest even (checked bit
  // for bit against ATen's conversion on the host), so the looser test of the sums is never widened
  // by the rounding. A kernel that fails to launch or differs leaves the ATen ops, and `why` says
  // so; a fault that leaves the device unusable (a sticky CUDA error) is thrown instead, since
  // nothing else could run there either. The one host sync is here, before any window.
  bool fused_crop_holds(std::string& why) {
    try {
      const int w = 517, h = 389, s = options_.image_size;
      std::vector<std::uint8_t> pixels(static_cast<std::size_t>(w) * h * 3);
      for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<std::uint8_t>((k * 37 + k / 7) % 256);
      const at::Tensor host_pixels = at::from_blob(pixels.data(), {static_cast<std::int64_t>(pixels.size())}, at::kByte);
      const at::Tensor device_pixels = host_pixels.to(device_);
      const resize_plan plans[3] = {train_plan({10, 21, 301, 453}, s, true), train_plan({3, 5, 40, 57}, s, false),
                                    eval_plan(h, w, s)};
      fused_crop_job jobs[3];
      for (int i = 0; i < 3; ++i) jobs[i] = {device_pixels.data_ptr<std::uint8_t>(), 3LL * w, w, h, 3, fused_plan(plans[i])};
      const auto format = options_.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
      const at::TensorOptions on_host = at::TensorOptions().dtype(at::kFloat);
      at::Tensor expected = at::empty({3, 3, s, s}, on_host, format);
      for (int i = 0; i < 3; ++i) {
        fused_crop_job job = jobs[i];
        job.pixels = pixels.data();
        fused_crop_reference(job, i, output_as(expected, crop_dtype::float32), norm_);
      }
      const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device_.index());
      at::Tensor got = at::empty({3, 3, s, s}, on_host.device(device_), format);
      crop_kernel_.launch(jobs, 3, output_as(got, crop_dtype::float32), norm_, stream.stream());
      const at::Tensor got_host = got.cpu();  // waits for the kernel
      const double worst = (got_host.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
      if (worst > 1e-5) {
        why = "on this device it differs from the host path's values by up to " + std::to_string(worst);
        return false;
      }
      if (options_.dtype == at::kFloat) return true;
      at::Tensor stored = at::empty({3, 3, s, s}, on_host.device(device_).dtype(options_.dtype), format);
      crop_kernel_.launch(jobs, 3, batch_output(stored), norm_, stream.stream());
      if (at::equal(stored.cpu(), got_host.to(options_.dtype))) return true;
      why = std::string("on this device it rounds its floats to ") + c10::toString(options_.dtype) +
            " otherwise than to nearest even";
    } catch (const std::invalid_argument& e) {
      why = std::string("it refused the check's jobs: ") + e.what();
    } catch (const std::exception& e) {
      bool usable = true;
      try {
        c10::cuda::device_synchronize();
      } catch (...) {
        usable = false;
      }
      if (!usable) throw;
      why = std::string("it failed on this device: ") + e.what();
    }
    return false;
  }

  // The host plan on the device by ATen ops (crop_by_taps: the host path's taps, from the plan's
  // fractional span, as two matrix products): a file's region, or a worker's pixels at a DCT scale
  // with their scaled plan, cropped, resized, flipped as the fused kernel does.
  void crop_resize(const encoded_batch& e, std::int64_t i, at::Tensor dst) {
    const plan_region& r = decoded_[static_cast<std::size_t>(i)];  // the decoded pixels: whole, or the region
    const at::Tensor img = arena()
                               .narrow(0, layout_.offsets[static_cast<std::size_t>(i)],
                                       static_cast<std::int64_t>(r.width) * r.height * 3)
                               .view({r.height, r.width, 3});
    const fused_crop_plan plan = fused_plan(e.plans[static_cast<std::size_t>(i)], r.x0, r.y0, r.width, r.height);
    at::Tensor x = crop_by_taps(img, plan, options_.image_size).unsqueeze(0);
    // Normalised in float, as the host path, then stored in the batch's dtype.
    dst.copy_(x.mul_(scale_).add_(bias_)[0]);
  }

  c10::Device device_;
  nvjpeg_options options_;
  const nvjpeg_api* api_;
  unsigned int flags_ = 0;  // asked of both handles (handle_flags)
  std::unique_ptr<nvjpeg_session> hardware_, general_;
  bool preallocate_ = false;  // the engines' states are preallocated (nvjpeg_session::preallocate)
  std::optional<c10::cuda::CUDAStream> side_;
  int depth_ = 1;
  // Per hardware state: the number of the batch it last took, whose `read` event frees it
  // (take_state), -1 before any; batch_state_: the state this batch's hardware call took.
  static constexpr std::size_t max_states = 4;
  std::vector<std::int64_t> state_batch_;
  // The batches' `read` events, recorded round robin (read_fence_slots): more than the loader's
  // file ring holds batches in most profiles; an older fence waits for the oldest batch held.
  read_fence_slots read_slots_{16};
  event_pool read_events_;
  std::int64_t fenced_ = 0;  // batches whose `read` event was recorded
  cudaStream_t fence_stream_ = nullptr;  // the stream they were recorded on
  std::size_t batch_state_ = 0;
  bool batch_used_state_ = false;
  std::vector<std::uint8_t> engines_take_;  // by dataset index: 0 not asked yet, 1 the engines take it, 2 not
  bool moved_logged_ = false;               // move_to_workers has logged its first file
  bool refusal_logged_ = false;             // decode_refused has logged its first file
  static constexpr int max_fruitless_searches = 3;
  int fruitless_searches_ = 0;               // decode_refused's searches that found no file
  std::vector<std::size_t> refused_members_;  // decode_refused's finds (kept: no allocation per search)
  std::int64_t submitted_ = 0;
  std::size_t taken_ = 0;
  std::vector<at::cuda::CUDAEvent> ready_, free_;
  std::vector<at::Tensor> images_, labels_;
  // Decoded pixels, one batch each, used in turn; arena() is this batch's (image k's RGB rows at
  // layout_.offsets[k]).
  struct pixel_arena {
    at::Tensor bytes;
    at::cuda::CUDAEvent read;  // recorded after the crops of the last batch that used it
  };
  std::array<pixel_arena, 2> arenas_;
  int turn_ = 1;
  bool arenas_fresh_ = false;  // allocated since the host last waited for the decode stream
  arena_sizer sizer_;
  arena_layout layout_;
  std::vector<nvjpegImage_t> outputs_;
  std::vector<plan_region> decoded_;  // by image: the pixels in its arena region (whole, or its crop's region)
  bool regions_ = false;              // the engines decode regions of interest (nvjpegDecodeBatchedEx)
  std::string regions_why_;           // else why not, where the engines are used
  std::vector<std::int64_t> source_;  // the sample each batch position is cut from (itself unless replaced)
  // Per batch, kept so that their capacity is reused: each image's route, bytes in the arena and
  // whether no decoder could read it; the hardware call's images, their bytes and outputs.
  std::vector<route> routes_;
  std::vector<std::int64_t> image_bytes_;
  std::vector<char> bad_;
  std::vector<std::int64_t> members_;
  std::vector<const unsigned char*> member_data_;
  std::vector<std::size_t> member_lengths_;
  std::vector<nvjpegImage_t> member_outputs_;
  std::vector<pending> pending_;
  jpeg_decoder host_;
  device_decode_counts counts_;
  at::Tensor scale_, bias_;                // the ATen ops' normalisation
  fused_crop_normalizer norm_;             // the kernel's, the same numbers
  bool fused_ = false;                     // the fused kernel crops (its check at construction passed)
  std::int64_t batches_too_shrunk_ = 0;    // batches the kernel could not take, cropped by ATen ops
  std::string fused_why_;                  // else why not
  std::vector<fused_crop_job> jobs_;       // one per image of the batch being cropped
  fused_crop_launcher crop_kernel_;        // declared last: destroyed first, after the device sync above
};

}  // namespace

std::unique_ptr<transfer_stage> make_nvjpeg_transfer(c10::Device device, const nvjpeg_options& o, std::string& why) {
  TB_ASSERT(o.dtype == at::kFloat || o.dtype == at::kHalf || o.dtype == at::kBFloat16,
            "nvjpeg: the batches are float32, float16 or bfloat16");
  const nvjpeg_api* api = load_api(why);
  if (!api) return nullptr;
  return std::make_unique<nvjpeg_transfer>(device, o, api);
}

#endif

}  // namespace trainbench
