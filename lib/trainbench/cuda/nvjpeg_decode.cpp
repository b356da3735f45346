// data.decode: device. The loader's workers read the files and plan each crop (the host sampler,
// so crops match host decoding); this stage decodes the batch with nvJPEG's batched API (the
// hardware JPEG engines where the GPU has them, else the GPU-hybrid backend), then crops,
// resizes (the same antialiased bilinear filter as torchvision), flips and normalises on the
// device. libnvjpeg.so.13 is loaded at run time, so a host without it still runs (on the host
// path, with a note saying so).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>

#include <mutex>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cuda_transfer.hpp"
#include "trainbench/util/error.hpp"

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
    ok = api.create_ex && api.destroy && api.state_create && api.state_destroy && api.batched_init && api.batched &&
         api.decode && api.property;
  });
  if (!ok) why = "libnvjpeg.so.13 not loadable: " + error;
  return ok ? &api : nullptr;
}

void check(nvjpegStatus_t s, const char* call) {
  if (s != NVJPEG_STATUS_SUCCESS) throw run_error("nvjpeg", std::string(call) + " failed: status " + std::to_string(s));
}

// A handle and a decode state, destroyed together.
struct nvjpeg_session {
  const nvjpeg_api* api = nullptr;
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  nvjpeg_session(const nvjpeg_api* a, nvjpegBackend_t backend) : api(a) {
    if (api->create_ex(backend, nullptr, nullptr, 0, &handle) != NVJPEG_STATUS_SUCCESS) {
      handle = nullptr;
      return;
    }
    check(api->state_create(handle, &state), "nvjpegJpegStateCreate");
  }
  ~nvjpeg_session() {
    if (state) api->state_destroy(state);
    if (handle) api->destroy(handle);
  }
  nvjpeg_session(const nvjpeg_session&) = delete;
  nvjpeg_session& operator=(const nvjpeg_session&) = delete;
  explicit operator bool() const { return handle != nullptr; }
};

class nvjpeg_transfer final : public transfer_stage, public copy_lane {
 public:
  nvjpeg_transfer(c10::Device device, const nvjpeg_options& o, const nvjpeg_api* api)
      : device_(device), options_(o), api_(api) {
    c10::cuda::CUDAGuard guard(device);
    hardware_ = std::make_unique<nvjpeg_session>(api, NVJPEG_BACKEND_HARDWARE);
    if (!*hardware_) hardware_.reset();
    general_ = std::make_unique<nvjpeg_session>(api, NVJPEG_BACKEND_DEFAULT);
    if (!*general_) throw run_error("nvjpeg", "nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT) failed");
    if (o.copy_stream) side_ = c10::cuda::getStreamFromPool(false, device.index());
    depth_ = side_ ? 2 : 1;
    ready_.resize(static_cast<std::size_t>(depth_));
    free_.resize(static_cast<std::size_t>(depth_));
    std::vector<float> scale, bias;
    for (std::size_t c = 0; c < 3; ++c) {
      scale.push_back(static_cast<float>(1.0 / (255.0 * o.std[c])));
      bias.push_back(static_cast<float>(-o.mean[c] / o.std[c]));
    }
    auto opts = at::TensorOptions().dtype(at::kFloat);
    scale_ = at::tensor(scale, opts).view({1, 3, 1, 1}).to(device);
    bias_ = at::tensor(bias, opts).view({1, 3, 1, 1}).to(device);
  }

  int lookahead() const override { return side_ ? 1 : 0; }
  // The decode and its copies run on the side stream when there is one: the clock times h2d there.
  std::optional<c10::cuda::CUDAStream> stream() const override { return side_; }

  std::string describe() const override {
    return std::string("nvJPEG (") + (hardware_ ? "hardware JPEG engines" : "GPU hybrid backend") + ", " + api_->path +
           "): batched decode, then crop, resize, flip and normalise on " +
           (side_ ? "a side stream, one batch ahead" : "the compute stream");
  }

  void submit(const host_batch& batch, batch_loader& loader) override {
    TB_ASSERT(batch.encoded, "data.decode: device needs the loader's encoded batches");
    const encoded_batch& e = *batch.encoded;
    const std::int64_t n = batch.count;
    const std::size_t slot = static_cast<std::size_t>(submitted_++ % depth_);
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::CUDAStream stream = side_ ? *side_ : c10::cuda::getCurrentCUDAStream(device_.index());
    c10::cuda::CUDAStreamGuard stream_guard(stream);
    if (side_ && used_[slot]) free_[slot].block(stream);  // the step that read this buffer is done
    allocate(slot, batch);
    decode_all(e, n, stream);
    at::Tensor out = images_[slot].narrow(0, 0, n);
    for (std::int64_t i = 0; i < n; ++i) crop_resize(e, i, out[i]);
    out.mul_(scale_).add_(bias_);
    labels_[slot].narrow(0, 0, n).copy_(batch.labels.narrow(0, 0, n), true);
    ready_[slot].record(stream);
    used_[slot] = true;
    // The worker refills the slot's file bytes only after the decode has read them. Its fence is
    // an event of that host slot, which this thread records again only once the worker refilled
    // it (ready_[slot] is recorded again for a later batch while a worker may still wait on it).
    const std::size_t host_slot = static_cast<std::size_t>(batch.slot);
    if (host_fences_.size() <= host_slot) host_fences_.resize(static_cast<std::size_t>(loader.slots()));
    host_fences_[host_slot].record(stream);
    at::cuda::CUDAEvent* ev = &host_fences_[host_slot];
    // Read index and count first: once released, a worker may refill the slot at once.
    pending_.push_back({slot, batch.index, n});
    loader.release(batch, [ev] { ev->synchronize(); });
  }

  device_batch take() override {
    const pending p = pending_.front();
    pending_.erase(pending_.begin());
    taken_ = p.slot;
    if (side_) ready_[p.slot].block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return {images_[p.slot].narrow(0, 0, p.count), labels_[p.slot].narrow(0, 0, p.count), p.index, p.count};
  }

  void step_done() override {
    if (side_) free_[taken_].record(c10::cuda::getCurrentCUDAStream(device_.index()));
  }

 private:
  struct pending {
    std::size_t slot;
    std::int64_t index, count;
  };

  void allocate(std::size_t slot, const host_batch& batch) {
    if (images_.empty()) {
      const std::int64_t b = batch.labels.size(0), s = options_.image_size;
      auto opts = at::TensorOptions().device(device_);
      const auto format = options_.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
      for (int k = 0; k < depth_; ++k) {
        images_.push_back(at::empty({b, 3, s, s}, opts.dtype(at::kFloat), format));
        labels_.push_back(at::empty({b}, opts.dtype(at::kLong)));
      }
      used_.assign(static_cast<std::size_t>(depth_), false);
    }
    (void)slot;
  }

  // Each image's RGB pixels into its own device buffer (grown when a larger image arrives).
  void decode_all(const encoded_batch& e, std::int64_t n, c10::cuda::CUDAStream stream) {
    if (pixels_.size() < static_cast<std::size_t>(n)) pixels_.resize(static_cast<std::size_t>(n));
    data_.clear();
    lengths_.clear();
    outputs_.assign(static_cast<std::size_t>(n), nvjpegImage_t{});
    bool baseline = true;
    for (std::int64_t i = 0; i < n; ++i) {
      const jpeg_info& info = e.infos[static_cast<std::size_t>(i)];
      const std::int64_t bytes = static_cast<std::int64_t>(info.width) * info.height * 3;
      at::Tensor& buf = pixels_[static_cast<std::size_t>(i)];
      if (!buf.defined() || buf.numel() < bytes)
        buf = at::empty({bytes}, at::TensorOptions().device(device_).dtype(at::kByte));
      outputs_[static_cast<std::size_t>(i)].channel[0] = buf.data_ptr<std::uint8_t>();
      outputs_[static_cast<std::size_t>(i)].pitch[0] = static_cast<std::size_t>(info.width) * 3;
      data_.push_back(e.bytes.data() + e.offsets[static_cast<std::size_t>(i)]);
      lengths_.push_back(e.sizes[static_cast<std::size_t>(i)]);
      baseline = baseline && !info.progressive;
    }
    // The hardware engines take single-scan baseline files; a batch with others, or one they
    // refuse, goes image by image through the general backend.
    if (hardware_ && baseline && batched(*hardware_, n, stream)) return;
    for (std::int64_t i = 0; i < n; ++i) {
      const nvjpegStatus_t s = api_->decode(general_->handle, general_->state, data_[static_cast<std::size_t>(i)],
                                            lengths_[static_cast<std::size_t>(i)], NVJPEG_OUTPUT_RGBI,
                                            &outputs_[static_cast<std::size_t>(i)], stream.stream());
      if (s != NVJPEG_STATUS_SUCCESS)
        throw run_error("nvjpeg", "nvjpegDecode failed (status " + std::to_string(s) + ") on sample " +
                                      std::to_string(e.indices[static_cast<std::size_t>(i)]) + " of the image folder");
    }
  }

  bool batched(nvjpeg_session& session, std::int64_t n, c10::cuda::CUDAStream stream) {
    if (initialized_for_ != n) {
      if (api_->batched_init(session.handle, session.state, static_cast<int>(n), 1, NVJPEG_OUTPUT_RGBI) !=
          NVJPEG_STATUS_SUCCESS)
        return false;
      initialized_for_ = n;
    }
    return api_->batched(session.handle, session.state, data_.data(), lengths_.data(), outputs_.data(),
                         stream.stream()) == NVJPEG_STATUS_SUCCESS;
  }

  // The host plan on the device: rows and columns [lo, hi) resized to out_total, then
  // [out_first, out_first + S) kept (train: the crop box to S; eval: Resize then CenterCrop).
  void crop_resize(const encoded_batch& e, std::int64_t i, at::Tensor dst) {
    const jpeg_info& info = e.infos[static_cast<std::size_t>(i)];
    const resize_plan& p = e.plans[static_cast<std::size_t>(i)];
    const std::int64_t s = options_.image_size;
    at::Tensor img = pixels_[static_cast<std::size_t>(i)]
                         .narrow(0, 0, static_cast<std::int64_t>(info.width) * info.height * 3)
                         .view({info.height, info.width, 3});
    at::Tensor crop = img.narrow(0, p.y.lo, p.y.hi - p.y.lo).narrow(1, p.x.lo, p.x.hi - p.x.lo);
    at::Tensor x = crop.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat);
    x = at::_upsample_bilinear2d_aa(x, {p.y.out_total, p.x.out_total}, false);
    x = x.narrow(2, p.y.out_first, s).narrow(3, p.x.out_first, s);
    if (p.flip) x = x.flip({3});
    dst.copy_(x[0]);
  }

  c10::Device device_;
  nvjpeg_options options_;
  const nvjpeg_api* api_;
  std::unique_ptr<nvjpeg_session> hardware_, general_;
  std::optional<c10::cuda::CUDAStream> side_;
  int depth_ = 1;
  std::int64_t submitted_ = 0, initialized_for_ = -1;
  std::size_t taken_ = 0;
  std::vector<at::cuda::CUDAEvent> ready_, free_, host_fences_;
  std::vector<bool> used_;
  std::vector<at::Tensor> images_, labels_, pixels_;
  std::vector<const unsigned char*> data_;
  std::vector<std::size_t> lengths_;
  std::vector<nvjpegImage_t> outputs_;
  std::vector<pending> pending_;
  at::Tensor scale_, bias_;
};

}  // namespace

std::unique_ptr<transfer_stage> make_nvjpeg_transfer(c10::Device device, const nvjpeg_options& o, std::string& why) {
  const nvjpeg_api* api = load_api(why);
  if (!api) return nullptr;
  return std::make_unique<nvjpeg_transfer>(device, o, api);
}

#endif

}  // namespace trainbench
