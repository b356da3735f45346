// [gpu] tests of the CUDA paths' device, stream, memory and skip rules. They use CUDA headers,
// so they are compiled only against a CUDA LibTorch (the pinned wheel is one).
#if TRAINBENCH_CUDA
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "gpu/exact_math.hpp"
#include "gpu/gpu_profiles.hpp"
#include "gpu/require_cuda.hpp"
#include "helpers.hpp"
#include "model_twins.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/pipeline.hpp"

using namespace trainbench;

namespace {
using tbgpu::require_cuda;

step_options options(amp_mode amp, bool foreach) {
  step_options o;
  o.device = c10::Device(c10::kCUDA, 0);
  o.amp = amp;
  o.scaler = amp == amp_mode::fp16;
  o.optimizer.lr = 0.01;
  o.optimizer.momentum = 0.9;
  o.optimizer.foreach = foreach;
  return o;
}

std::vector<at::Tensor> host_copies(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone().cpu());
  return out;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().cpu().contiguous(), y = b.detach().cpu().contiguous();
  if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type()) return false;
  if (x.scalar_type() != at::kFloat) return at::equal(x, y);
  return at::equal(x.view(at::kInt), y.view(at::kInt));
}

device_batch batch(int i, std::int64_t n, std::int64_t size) {
  at::manual_seed(2000 + i);
  return {at::randn({n, 3, size, size}).cuda(), at::randint(10, {n}, at::kLong).cuda(), i, n};
}

// Two ResNet-18s with the same weights and batch-norm statistics, on the GPU, in training mode.
std::pair<resnet, resnet> twins() {
  at::manual_seed(0);
  resnet a = make_resnet("resnet18", 10), b = make_resnet("resnet18", 10);
  tbtest::copy_model_state(a, b);
  a->to(at::kCUDA);
  b->to(at::kCUDA);
  a->train();
  b->train();
  return {a, b};
}

void eager_batch(train_step& s, const device_batch& b) {
  s.forward(b);
  s.backward();
  s.optimizer_step();
}

struct run_out {
  std::int64_t batch = 0;
  double loss_first = 0;
};
run_out run_profile(const std::string& yaml, const std::vector<std::string>& sets) {
  const auto dir = tbtest::scratch("gpu-cuda-paths");
  tbtest::write_text(dir / "p.yaml", yaml);
  effective_settings e;
  std::int64_t parameters = 0;
  const profile prof = load_profile(dir / "p.yaml", sets).value;
  pipeline p = build_pipeline(prof, build_options{}, e, parameters);
  runner r(p, prof.measure);
  r.run();
  return {e.batch_size, *r.result().loss_first};
}
}  // namespace

TEST_CASE("graph step: prepare() captures without changing the model, then trains as the eager step", "[gpu]") {
  require_cuda();
  const tbgpu::cuda_math_guard exact;  // fp32 at 1e-4: no TF32, deterministic cuDNN algorithms
  for (amp_mode amp : {amp_mode::off, amp_mode::fp16}) {
    INFO(to_string(amp));
    auto [graphed, eager] = twins();
    auto gstep = make_graph_step(graphed, options(amp, true), {8, 3, 32, 32}, false);
    auto estep = make_eager_step(eager, options(amp, true));
    std::vector<at::Tensor> state = graphed->parameters();
    for (const auto& b : graphed->buffers()) state.push_back(b);
    const auto before = host_copies(state);
    gstep->prepare();
    torch::cuda::synchronize();
    for (std::size_t i = 0; i < state.size(); ++i) CHECK(same_bits(state[i], before[i]));
    if (gstep->loss_scale().defined()) CHECK(gstep->loss_scale().item<double>() == 65536.0);
    for (int i = 0; i < 4; ++i) {
      const auto b = batch(i, 8, 32);
      gstep->forward(b);
      eager_batch(*estep, b);
    }
    const double tol = amp == amp_mode::off ? 1e-4 : 2e-2;
    const auto pg = host_copies(graphed->parameters()), pe = host_copies(eager->parameters());
    for (std::size_t i = 0; i < pg.size(); ++i) CHECK(at::allclose(pg[i], pe[i], tol, tol));
  }
}

TEST_CASE("graph step: an inf after clean steps skips the whole step, per-parameter and foreach", "[gpu]") {
  require_cuda();
  for (bool foreach : {false, true}) {
    INFO((foreach ? "foreach" : "per-parameter"));
    auto [graphed, eager] = twins();
    // A device flag added to one gradient: 0 on clean steps, inf on the poisoned one. The hook's
    // add is captured into the graph and reads the flag's memory at every replay.
    const at::Tensor poison_g = at::zeros({}, at::kCUDA), poison_e = at::zeros({}, at::kCUDA);
    graphed->parameters()[5].register_hook([poison_g](const at::Tensor& g) { return g + poison_g; });
    eager->parameters()[5].register_hook([poison_e](const at::Tensor& g) { return g + poison_e; });
    auto gstep = make_graph_step(graphed, options(amp_mode::fp16, foreach), {8, 3, 32, 32}, false);
    auto estep = make_eager_step(eager, options(amp_mode::fp16, foreach));
    gstep->prepare();
    // Until three steps in a row applied (the first ones may overflow at the initial scale).
    int clean_in_a_row = 0;
    for (int i = 0; i < 30 && clean_in_a_row < 3; ++i) {
      const double skipped = gstep->skipped_steps().item<double>();
      const auto b = batch(i, 8, 32);
      gstep->forward(b);
      eager_batch(*estep, b);
      clean_in_a_row = gstep->skipped_steps().item<double>() == skipped ? clean_in_a_row + 1 : 0;
    }
    REQUIRE(clean_in_a_row == 3);
    const double skipped_g = gstep->skipped_steps().item<double>(), skipped_e = estep->skipped_steps().item<double>();
    const auto before = host_copies(graphed->parameters());
    poison_g.fill_(std::numeric_limits<float>::infinity());
    poison_e.fill_(std::numeric_limits<float>::infinity());
    const auto poisoned = batch(100, 8, 32);
    gstep->forward(poisoned);
    eager_batch(*estep, poisoned);
    torch::cuda::synchronize();
    CHECK(gstep->skipped_steps().item<double>() == skipped_g + 1);
    CHECK(estep->skipped_steps().item<double>() == skipped_e + 1);
    const auto after = graphed->parameters();
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(same_bits(after[i], before[i]));
    // Momentum kept too: the next clean step lands where the eager twin's does.
    poison_g.zero_();
    poison_e.zero_();
    const auto clean = batch(101, 8, 32);
    gstep->forward(clean);
    eager_batch(*estep, clean);
    const auto pg = host_copies(graphed->parameters()), pe = host_copies(eager->parameters());
    for (std::size_t i = 0; i < pg.size(); ++i) CHECK(at::allclose(pg[i], pe[i], 2e-2, 2e-2));
    // Why each was skipped, counted inside the graph as in the eager step: the poisoned gradient
    // under `backward`; then a batch holding nan under `input`, whatever its loss and gradients.
    const at::Tensor causes_g = gstep->scaler()->skip_causes().cpu(), causes_e = estep->scaler()->skip_causes().cpu();
    CHECK(causes_g[2].item<double>() >= 1);
    CHECK(causes_g[0].item<double>() == 0);
    CHECK(causes_e[0].item<double>() == 0);
    device_batch bad = batch(102, 8, 32);
    bad.images[3][1][7][9] = std::numeric_limits<float>::quiet_NaN();
    gstep->forward(bad);
    eager_batch(*estep, bad);
    torch::cuda::synchronize();
    CHECK(gstep->scaler()->skip_causes()[0].item<double>() == 1);
    CHECK(estep->scaler()->skip_causes()[0].item<double>() == 1);
    CHECK(std::isnan(gstep->scaler()->input_abs_max().item<double>()));
  }
}

TEST_CASE("a capture that throws restores the autocast cache, and the next batch captures again", "[gpu]") {
  require_cuda();
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  model->to(at::kCUDA);
  int backward_passes = 0;
  bool armed = true;
  // Throws in the first backward after the eager warm-up: the one being captured.
  const auto hook = model->parameters()[0].register_hook([&](const at::Tensor&) {
    if (armed && ++backward_passes > graph_warmup_steps) throw std::runtime_error("backward failed during capture");
  });
  auto step = make_graph_step(model, options(amp_mode::fp16, true), {8, 3, 32, 32}, false);
  REQUIRE(at::autocast::is_autocast_cache_enabled());
  CHECK_THROWS(step->forward(batch(0, 8, 32)));
  CHECK(at::autocast::is_autocast_cache_enabled());
  armed = false;
  model->parameters()[0].remove_hook(hook);
  CHECK_NOTHROW(step->forward(batch(1, 8, 32)));
  torch::cuda::synchronize();
  CHECK(std::isfinite(step->last_loss().item<double>()));
}

// A sync inside the capture invalidates it, so capture_end() itself fails; the allocator must still
// learn that the capture is over (else every later emptyCache() fails an internal assertion, and
// the batch-size search calls one after each try).
TEST_CASE("an invalidated capture leaves the allocator usable, and the next batch captures again", "[gpu]") {
  require_cuda();
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  model->to(at::kCUDA);
  int backward_passes = 0;
  bool armed = true;
  const auto hook = model->parameters()[0].register_hook([&](const at::Tensor& g) {
    if (armed && ++backward_passes > graph_warmup_steps) (void)g.sum().item<float>();  // a host sync: illegal
  });
  auto step = make_graph_step(model, options(amp_mode::off, false), {8, 3, 32, 32}, false);
  CHECK_THROWS(step->forward(batch(0, 8, 32)));
  armed = false;
  model->parameters()[0].remove_hook(hook);
  (void)cudaGetLastError();
  CHECK_NOTHROW(c10::cuda::CUDACachingAllocator::emptyCache());
  CHECK_NOTHROW(step->forward(batch(1, 8, 32)));
  torch::cuda::synchronize();
  CHECK(std::isfinite(step->last_loss().item<double>()));
}

TEST_CASE("graph capture starts from an emptied cache: no second copy of the warm-up's blocks", "[gpu]") {
  require_cuda();
  c10::cuda::CUDACachingAllocator::emptyCache();
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  model->to(at::kCUDA);
  model->train();
  auto step = make_graph_step(model, options(amp_mode::off, true), {64, 3, 224, 224}, false);
  step->prepare();
  torch::cuda::synchronize();
  const auto reserved = c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].current;
  // What emptying the cache now gives back was held beside the graph's private pool.
  c10::cuda::CUDACachingAllocator::emptyCache();
  const auto left = c10::cuda::CUDACachingAllocator::getDeviceStats(0).reserved_bytes[0].current;
  INFO("reserved after capture " << reserved << " B, cached outside the graph " << (reserved - left) << " B");
  CHECK(reserved - left < reserved / 10);
}

TEST_CASE("batch_size: auto starts from the profile's seed: first loss as with the found size given", "[gpu]") {
  require_cuda();
  const std::string yaml = tbgpu::auto_seed_profile();
  const run_out searched = run_profile(yaml, {});
  REQUIRE(searched.batch >= 8);
  const run_out given = run_profile(yaml, {"train.batch_size=" + std::to_string(searched.batch)});
  CHECK(given.batch == searched.batch);
  CHECK(searched.loss_first == Approx(given.loss_first).epsilon(1e-6));
}

// Each try fuses the batch norms as the run does: the fused ops' workspaces, masks and per-shape
// checks are in what the search sized, so the run must train at the size found, with the tries'
// cuDNN plans of other sizes dropped.
TEST_CASE("batch_size: auto with backend.compile sizes the fused step, and the run trains at the size found", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-auto-compile");
  tbtest::write_text(dir / "p.yaml", tbgpu::auto_seed_profile());
  effective_settings e;
  std::int64_t parameters = 0;
  const profile prof = load_profile(dir / "p.yaml", {"backend.compile=true", "train.amp=fp16"}).value;
  pipeline p = build_pipeline(prof, build_options{}, e, parameters);
  runner r(p, prof.measure);
  r.run();
  for (const auto& part : e.compile) UNSCOPED_INFO("compile: " << part);
  for (const auto& note : e.notes) UNSCOPED_INFO("note: " << note);
  REQUIRE(e.batch_size >= 8);
  CHECK(e.batch_size_search.size() >= 2);
  CHECK(std::isfinite(*r.result().loss_first));
  const bool fused = std::any_of(e.compile.begin(), e.compile.end(),
                                 [](const std::string& part) { return part.rfind("batch norm", 0) == 0; });
  if (!fused) WARN("no batch norm fused on this GPU (the notes say why): the search sized the unfused step");
}

TEST_CASE("window syncs wait on the run's GPU, whichever device is current", "[gpu]") {
  require_cuda();
  if (torch::cuda::device_count() < 2) {
    WARN("needs two GPUs: nothing checked on this host");
    return;
  }
  const c10::Device second(c10::kCUDA, 1);
  c10::cuda::set_device(0);
  const auto dir = tbtest::scratch("gpu-second-device");
  tbtest::write_text(dir / "p.yaml", tbgpu::second_device_profile());
  effective_settings e;
  std::int64_t parameters = 0;
  pipeline p = build_pipeline(load_profile(dir / "p.yaml").value, build_options{}, e, parameters);
  CHECK(c10::cuda::current_device() == 1);  // made current once, when the pipeline is built

  auto clock = make_cuda_clock(second, nullptr);
  clock->keep_spans(true);  // the reference events too must be recorded and read on GPU 1
  clock->start_window(1);
  clock->begin(stage_id::forward, 0);
  {
    c10::cuda::CUDAGuard on_second(second);
    at::cuda::sleep(1'000'000'000);  // about half a second of device time on GPU 1
  }
  clock->end(stage_id::forward, 0);
  c10::cuda::set_device(0);  // as a pinned allocation or a library may leave it
  window_times t;
  // Unguarded, the sync waited on GPU 0 and reading the unfinished event threw cudaErrorNotReady.
  REQUIRE_NOTHROW(clock->finish_window(t));
  CHECK(t.per_batch.at(0)[static_cast<int>(stage_id::forward)] > 0);
  CHECK(!t.spans.empty());
}

TEST_CASE("copy stages hand every batch over with its own index and count", "[gpu]") {
  require_cuda();
  for (const std::string& transfer : tbgpu::transfer_index_variants()) {
    INFO(transfer);
    const auto dir = tbtest::scratch("gpu-transfer-index");
    // Tiny batches and two slots: a worker refills a released slot almost at once.
    tbtest::write_text(dir / "p.yaml", tbgpu::transfer_index_profile(transfer));
    effective_settings e;
    std::int64_t parameters = 0;
    build_options o;
    o.with_step = false;
    pipeline p = build_pipeline(load_profile(dir / "p.yaml").value, o, e, parameters);
    int wrong = 0;
    std::int64_t submitted = 0;
    for (std::int64_t i = 0; i < 3000; ++i) {
      while (submitted <= i + p.transfer->lookahead()) {
        p.transfer->submit(p.loader->next(), *p.loader);
        ++submitted;
      }
      const device_batch b = p.transfer->take();
      if (b.index != i || b.count != 4) ++wrong;
      p.transfer->step_done();
    }
    CHECK(wrong == 0);
  }
}
#endif
