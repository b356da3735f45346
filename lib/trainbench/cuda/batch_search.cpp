// train.batch_size: auto, the tries: does one real training step fit on the device at this
// batch size? (The search and its bookkeeping are in measure/batch_search.cpp.)
#include "trainbench/measure/batch_search.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cudnn_batch_norm.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/util/log.hpp"

namespace trainbench {
namespace {

// ATen's cuDNN convolutions catch the allocator's OutOfMemoryError for each plan's workspace and
// try the next plan; when every plan failed so they throw a plain error of their own (v8: "FIND
// (or GET) was unable to find an engine to execute this computation"; v7: "Unable to find a
// valid cuDNN algorithm to run convolution"). Near the limit that is the same answer.
bool allocation_failure(const std::string& message) {
  for (const char* sign : {"out of memory", "ALLOC_FAILED", "ALLOCATION_FAILED", "unable to find an engine",
                           "Unable to find a valid cuDNN algorithm"})
    if (message.find(sign) != std::string::npos) return true;
  return false;
}

// A library's failed allocation at this batch size: true, said in the log (where a failure at the
// smallest batch would otherwise read as "nothing fits"). Any other error goes on up: it rethrows
// the error being handled, so call it from a catch block only.
bool said_does_not_fit(std::int64_t batch, const std::string& message) {
  if (!allocation_failure(message)) throw;
  log_info("batch_size: auto: batch " + std::to_string(batch) + " does not fit: " + message.substr(0, 200));
  return true;
}

// One real step (two, so optimizer state and the allocator settle) at this batch size, plus the
// device input buffers the transfer stage will hold.
bool fits(std::int64_t batch, const batch_search_request& r) {
  const c10::cuda::CUDAGuard device_guard(r.device);  // the sync and the cache below are the run's GPU's
  bool ok = true;
  try {
    at::manual_seed(0);
    resnet model = make_resnet(r.arch, r.num_classes);
    model->to(r.device);
    if (r.channels_last) weights_to_channels_last(*model);
    model->train();
    model->set_stem_padded(r.pad_stem);
    const std::vector<std::int64_t> shape{batch, 3, r.image_size, r.image_size};
    if (r.fusion) {
      // The fused ops take their workspaces, masks and saved statistics from the caching
      // allocator, and their per-shape checks run scratch problems of the batch's shapes: sized
      // here as the run will meet them, before the first step.
      fusion_request fused = *r.fusion;
      fused.input_shape = shape;
      fuse_batch_norm(model, fused);
    }
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
    ok = !said_does_not_fit(batch, e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    // backend.compile's fused batch norms report cuDNN's statuses as runtime errors (its frontend
    // and Ex calls, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED among them): the same rule.
    ok = !said_does_not_fit(batch, e.what());
  }
  // cuBLAS keeps a workspace per handle and stream for the life of the process, and each try's
  // graph captures on another of the pool's streams: freed here, or the tries after it, and the
  // run, would each hold less memory than the one before.
  at::cuda::clearCublasWorkspaces();
  c10::cuda::CUDACachingAllocator::emptyCache();
  return ok;
}

}  // namespace

std::int64_t search_batch_size(const batch_search_request& r, std::vector<std::pair<std::int64_t, bool>>& trials) {
  const std::int64_t found = search_largest_batch([&r](std::int64_t batch) { return fits(batch, r); }, trials);
  if (r.fusion) {
    // Each try built cuDNN's batch-norm graphs for its own batch; the run keeps only its own.
    std::vector<std::int64_t> others;
    for (const auto& [batch, fitted] : trials)
      if (batch != found) others.push_back(batch);
    forget_cudnn_batch_norm_batches(others);
  }
  return found;
}

}  // namespace trainbench
