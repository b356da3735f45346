// train.batch_size: auto. The largest batch whose full training step fits on the device:
// powers of two until one fails, then a binary search between the last fit and the first failure.
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {

constexpr std::int64_t first_try = 8, limit = 1 << 16;

bool allocation_failure(const std::string& message) {
  for (const char* sign : {"out of memory", "ALLOC_FAILED"})
    if (message.find(sign) != std::string::npos) return true;
  return false;
}

// One real step (two, so optimizer state and the allocator settle) at this batch size, plus the
// device input buffers the transfer stage will hold.
bool fits(std::int64_t batch, const batch_search_request& r) {
  bool ok = true;
  try {
    at::manual_seed(0);
    resnet model = make_resnet(r.arch, r.num_classes);
    model->to(r.device);
    if (r.channels_last)
      for (auto& p : model->parameters())
        if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
    model->train();
    const std::vector<std::int64_t> shape{batch, 3, r.image_size, r.image_size};
    auto step = r.cuda_graph ? make_graph_step(model, r.step, shape, r.channels_last) : make_eager_step(model, r.step);
    auto opts = at::TensorOptions().device(r.device);
    std::vector<at::Tensor> ring;
    for (int i = 0; i < r.input_buffers; ++i) ring.push_back(at::empty(shape, opts));
    device_batch b{at::randn(shape, opts), at::randint(r.num_classes, {batch}, opts.dtype(at::kLong)), 0, batch};
    if (r.channels_last) b.images = b.images.contiguous(at::MemoryFormat::ChannelsLast);
    for (int i = 0; i < 2; ++i) {
      step->forward(b);
      step->backward();
      step->optimizer_step();
    }
    c10::cuda::device_synchronize();
  } catch (const c10::OutOfMemoryError&) {
    ok = false;
  } catch (const c10::Error& e) {
    // cuBLAS and cuDNN report a failed workspace allocation as their own status, not as the
    // caching allocator's OutOfMemoryError; at this batch size that is the same answer.
    if (!allocation_failure(e.what_without_backtrace())) throw;
    ok = false;
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  return ok;
}

}  // namespace

std::int64_t search_batch_size(const batch_search_request& r, std::vector<std::pair<std::int64_t, bool>>& trials) {
  auto attempt = [&](std::int64_t b) {
    const bool ok = fits(b, r);
    trials.push_back({b, ok});
    return ok;
  };
  std::int64_t good = 0, bad = 0;
  for (std::int64_t b = first_try; b <= limit; b *= 2) {
    if (!attempt(b)) {
      bad = b;
      break;
    }
    good = b;
  }
  if (good == 0)
    throw run_error("out_of_memory",
                    "train.batch_size: auto: not even a batch of " + std::to_string(first_try) + " fits on the device");
  if (bad == 0) return good;                                   // everything up to the limit fits
  while (bad - good > std::max<std::int64_t>(1, good / 64)) {  // within ~1.5%: each try is a real step
    const std::int64_t mid = good + (bad - good) / 2;
    (attempt(mid) ? good : bad) = mid;
  }
  return good;
}

}  // namespace trainbench
