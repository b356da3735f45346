// Tests that need a CUDA device. Tagged [gpu]: CPU hosts skip them with `ctest -LE gpu`;
// scripts/gpu-check.sh runs them with `ctest -L gpu`.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "gpu/compile_notes.hpp"
#include "gpu/exact_math.hpp"
#include "gpu/gpu_profiles.hpp"
#include "gpu/require_cuda.hpp"
#include "helpers.hpp"
#include "model_twins.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/conv_fusion_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/report/ladder.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

std::vector<std::string> tbgpu::expected_notes(const profile& p, std::int64_t batch) {
  std::vector<std::string> notes;
  const c10::Device device(c10::kCUDA, 0);
  resnet probe = make_resnet(p.model.arch, p.model.num_classes);
  probe->to(at::kCUDA);
  fusion_request fr;
  fr.device = device;
  fr.amp = p.train.amp;
  fr.input_shape = {batch, 3, p.data.image_size, p.data.image_size};
  if (p.backend.compile) {
    fr.channels_last = true;
    fr.route = fused_batch_norm_route(p);
    for (const auto& f : fuse_batch_norm(probe, fr).ineffective) notes.push_back("backend.compile: " + f);
  }
  if (p.backend.conv_fusion) {
    fr.channels_last = p.model.channels_last || p.backend.compile;
    for (const auto& f : fuse_convolutions(probe, fr).ineffective) notes.push_back("backend.conv_fusion: " + f);
  }
  if (p.train.amp == amp_mode::bf16 && (!p.backend.compile || !notes.empty())) {
    const std::string bf16 = bf16_batch_norm_note(device, p.backend.compile || p.model.channels_last);
    if (!bf16.empty()) notes.push_back(bf16);
  }
  return notes;
}

namespace {
using tbgpu::require_cuda;

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone().cpu());
  return out;
}

step_options cuda_options(amp_mode amp) {
  step_options o;
  o.device = c10::Device(c10::kCUDA, 0);
  o.amp = amp;
  o.scaler = amp == amp_mode::fp16;
  o.optimizer.lr = 0.01;
  o.optimizer.foreach = true;
  return o;
}

std::vector<device_batch> batches(int n, std::int64_t size) {
  std::vector<device_batch> out;
  for (int i = 0; i < n; ++i) {
    at::manual_seed(1000 + i);
    out.push_back({at::randn({8, 3, size, size}).cuda(), at::randint(10, {8}, at::kLong).cuda(), i, 8});
  }
  return out;
}

pipeline build(const tbgpu::pipeline_variant& v, const std::vector<std::string>& sets, effective_settings& e) {
  const auto dir = tbtest::scratch("gpu-pipeline");
  tbtest::write_text(dir / "p.yaml", tbgpu::pipeline_profile(v.data, v.extra));
  std::int64_t parameters = 0;
  return build_pipeline(load_profile(dir / "p.yaml", sets).value, build_options{}, e, parameters);
}

double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

// A graphed ResNet-18 and two eager twins from the same weights, trained on the same 6 batches.
// The second eager twin is the control: how far two runs of the same eager steps land apart
// under the current cuDNN settings (the noise floor the graph is judged against).
struct twin_run {
  std::vector<at::Tensor> before, graphed, eager, control;
  double loss_graphed = 0, loss_eager = 0;
};

twin_run run_twins(amp_mode amp) {
  const auto data = batches(6, 32);
  at::manual_seed(0);
  resnet graphed = make_resnet("resnet18", 10), eager = make_resnet("resnet18", 10),
         control = make_resnet("resnet18", 10);
  for (resnet* m : {&graphed, &eager, &control}) {
    (*m)->to(at::kCUDA);
    (*m)->eval();
  }
  tbtest::copy_model_state(graphed, eager);
  tbtest::copy_model_state(graphed, control);
  auto gstep = make_graph_step(graphed, cuda_options(amp), {8, 3, 32, 32}, false);
  auto estep = make_eager_step(eager, cuda_options(amp)), cstep = make_eager_step(control, cuda_options(amp));
  auto eager_batch = [](train_step& s, const device_batch& b) {
    s.forward(b);
    s.backward();
    s.optimizer_step();
  };
  // The capture's eager warm-up steps are undone: all three train on the same batches from the start.
  twin_run out;
  for (int i = 0; i < 6; ++i) {
    if (i == 1) out.before = clones(graphed->parameters());
    gstep->forward(data[i]);
    eager_batch(*estep, data[i]);
    eager_batch(*cstep, data[i]);
  }
  torch::cuda::synchronize();
  out.graphed = clones(graphed->parameters());
  out.eager = clones(eager->parameters());
  out.control = clones(control->parameters());
  out.loss_graphed = gstep->last_loss().item<double>();
  out.loss_eager = estep->last_loss().item<double>();
  return out;
}
}  // namespace

// The first H200 run (2026-12-04) saw this fail in fp32 (parameters off by more than 1e-4, losses
// 2.29629 vs 2.29934): the comparison then ran with LibTorch's defaults, TF32 convolutions and
// any cuDNN algorithm. It now runs with exact math, where the eager control must repeat itself
// and the graph must land on the eager step; the defaults' noise floor is measured and printed.
TEST_CASE("graphed step matches an eager twin after 5 steps, and its replays keep training", "[gpu]") {
  require_cuda();
  for (amp_mode amp : {amp_mode::off, amp_mode::bf16, amp_mode::fp16}) {
    INFO(to_string(amp));
    // fp32 with exact math: float32 rounding only. AMP: different kernels, same math.
    const double tol = amp == amp_mode::off ? 1e-5 : 2e-2;
    twin_run r;
    {
      const tbgpu::cuda_math_guard exact(tbgpu::cuda_math::exact);
      r = run_twins(amp);
    }
    const double floor = max_abs_diff(r.eager, r.control), off = max_abs_diff(r.graphed, r.eager);
    INFO("largest difference: graph vs eager " << off << ", eager vs eager (noise floor) " << floor);
    CHECK(floor <= tol);  // else the settings did not make the eager step repeat itself
    bool moved = false;
    for (std::size_t i = 0; i < r.graphed.size(); ++i) {
      CHECK(at::allclose(r.graphed[i], r.eager[i], tol, tol));
      moved = moved || !at::equal(r.graphed[i], r.before[i]);
    }
    CHECK(moved);  // replays change the parameters: momentum and grads are live, not frozen
    CHECK(r.loss_graphed == Approx(r.loss_eager).epsilon(tol * 10));
  }
  // Evidence, not a check: the same comparison with LibTorch's defaults (as the first H200 run
  // had them). A graph-vs-eager difference of the order of the eager-vs-eager one is noise.
  const tbgpu::cuda_math_guard defaults(tbgpu::cuda_math::libtorch_defaults);
  const twin_run d = run_twins(amp_mode::off);
  WARN("fp32 with LibTorch's defaults (TF32 convolutions, any cuDNN algorithm): largest difference graph vs eager "
       << max_abs_diff(d.graphed, d.eager) << ", eager vs eager " << max_abs_diff(d.eager, d.control) << "; losses "
       << d.loss_graphed << " vs " << d.loss_eager);
}

TEST_CASE("fp16 scaler skips a step with an injected inf on CUDA", "[gpu]") {
  require_cuda();
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  model->to(at::kCUDA);
  auto step = make_eager_step(model, cuda_options(amp_mode::fp16));
  const auto data = batches(1, 32);
  step->forward(data[0]);
  step->backward();
  model->parameters()[3].mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
  const auto before = clones(model->parameters());
  step->optimizer_step();
  CHECK(step->skipped_steps().item<double>() == 1.0);
  CHECK(step->loss_scale().item<double>() == 32768.0);
  const auto after = clones(model->parameters());
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(at::equal(before[i], after[i]));
}

TEST_CASE("copy stream delivers every batch intact, with slow and fast steps", "[gpu]") {
  require_cuda();
  effective_settings e;
  auto p = build(tbgpu::copy_stream_depth_3, {}, e);
  REQUIRE(e.copy_stream);
  REQUIRE(p.transfer->lookahead() == 2);
  // Drive the transfer stage directly; checksum on the host (loader side) and on the device (step side).
  std::deque<double> expected;
  int mismatches = 0;
  for (int i = 0; i < 300; ++i) {
    while (static_cast<int>(expected.size()) <= p.transfer->lookahead()) {
      const host_batch& hb = p.loader->next();
      expected.push_back(hb.images.sum().item<double>() + hb.labels.sum().item<double>());
      p.transfer->submit(hb, *p.loader);
    }
    device_batch db = p.transfer->take();
    if (i % 7 == 0) {
      // A deliberately slow step: a long chain of work on the compute stream.
      auto x = at::randn({2048, 2048}, at::kCUDA);
      for (int k = 0; k < 20; ++k) x = at::mm(x, x).tanh_();
    }
    const double got = db.images.sum().item<double>() + db.labels.sum().item<double>();
    if (std::abs(got - expected.front()) > 1e-3 * std::max(1.0, std::abs(got))) ++mismatches;
    expected.pop_front();
    p.transfer->step_done();
  }
  CHECK(mismatches == 0);
}

TEST_CASE("copy stream peak memory is bounded by depth, not by the batch count", "[gpu]") {
  require_cuda();
  auto peak_after = [](int batches) {
    effective_settings e;
    auto p = build(tbgpu::copy_stream_depth_2,
                   {"measure.measured_batches=" + std::to_string(batches), "measure.warmup_batches=2"}, e);
    measure_config m;
    m.warmup_batches = 2;
    m.measured_batches = batches;
    m.nvtx = nvtx_level::off;
    runner r(p, m);
    r.run();
    return *r.result().memory.device_peak_allocated_bytes;
  };
  const auto at10 = peak_after(10), at100 = peak_after(100);
  INFO(at10 << " vs " << at100);
  CHECK(static_cast<double>(at100) <= 1.02 * static_cast<double>(at10));
}

TEST_CASE("copy stream gives the blocking path's losses for a fixed seed", "[gpu]") {
  require_cuda();
  // Deterministic cuDNN algorithms: what differs between the two runs is then the copy path alone.
  const tbgpu::cuda_math_guard exact;
  auto losses = [](const tbgpu::pipeline_variant& v) {
    effective_settings e;
    auto p = build(v, {}, e);
    measure_config m;
    m.warmup_batches = 1;
    m.measured_batches = 5;
    runner r(p, m);
    r.run();
    return *r.result().loss_last;
  };
  const double blocking = losses(tbgpu::blocking);
  const double overlapped = losses(tbgpu::copy_stream_pinned);
  CHECK(overlapped == Approx(blocking).epsilon(1e-4));
}

TEST_CASE("every ladder rung runs on the GPU with no ineffective switches", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-ladder");
  const auto data = dir / "cifar";
  REQUIRE(tbtest::run_cli("make-dataset cifar10 --out '" + data.string() + "' --samples 2048").code == 0);
  for (const auto& file : ladder_profiles({(tbtest::source_dir() / "configs/ladder").string(),
                                           (tbtest::source_dir() / "configs/ladder-plus").string()})) {
    INFO(file);
    const auto report = dir / (fs::path(file).stem().string() + ".json");
    const auto r = tbtest::run_cli("run --strict --quiet --config '" + file + "' --set data.path='" + data.string() +
                                   "' --set measure.warmup_batches=3 --set measure.measured_batches=2 --out '" +
                                   report.string() + "'");
    INFO(r.output);
    CHECK(r.code == 0);
    const auto j = tbtest::read_json(report);
    CHECK(j["status"] == "ok");
    const profile p = load_profile(file).value;
    // backend.compile's batch-norm fusions say where they are not built for this device and
    // dtype, as fuse_batch_norm gives them; a bf16 rung whose batch norms PyTorch runs says that
    // PyTorch picks other kernels for them than in fp16 (03); nothing else.
    if (p.backend.compile) {
      CHECK(j["effective"]["compile"].back() == "cuda_graph");
      CHECK(j["effective"]["channels_last"] == true);
    }
    CHECK(j["effective"]["notes"].get<std::vector<std::string>>() == tbgpu::expected_notes(p, p.train.batch_size));
    CHECK(j["effective"]["cuda_graph"].get<bool>() == (p.backend.cuda_graph || p.backend.compile));
    CHECK(j["effective"]["copy_stream"].get<bool>() == p.transfer.copy_stream);
    CHECK(j["effective"]["pin_memory"].get<bool>() ==
          (p.data.pin_memory && p.data.source != data_source::device_synthetic));
    CHECK(j["effective"]["amp"] == to_string(p.train.amp));
    // A graph's replay is one stage, `step`, in place of forward, backward and optimizer
    // (backend.compile captures one too).
    const bool graphed = p.backend.cuda_graph || p.backend.compile;
    const auto& stages = j["results"]["stages_s"];
    CHECK(stages.contains("step") == graphed);
    CHECK(stages.contains("forward") == !graphed);
  }
}

// One GPU holds one NCCL rank, so this is the most a single-GPU host can check: the NCCL group is
// built, parameters broadcast, gradients all-reduced from the hooks, windows gathered.
TEST_CASE("a data-parallel run with NCCL and one rank on the GPU", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-nccl");
  const std::string config = tbtest::tiny_profile(dir, tbgpu::nccl_extra());
  const auto r = tbtest::run_shell(
      "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29573 \"$TB\" --config " +
      config + " --set device=cuda --set train.amp=fp16 --strict");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto report = tbtest::read_json(dir / "tiny.json");
  const auto& d = report["results"]["distributed"];
  CHECK(d["backend"] == "nccl");
  CHECK(d["world_size"] == 1);
  CHECK(d["allreduce_steps"].get<int>() > 0);
  CHECK(report["effective"]["device"] == "cuda:0");
  CHECK(report["results"]["stages_s"].contains("allreduce"));
  // The group is shut down at the end (process_group::shutdown), as destroy_process_group() would.
  CHECK(r.output.find("destroy_process_group() was not called") == std::string::npos);
}

// Two pipelines on one GPU in one process: a loop that resizes on one host thread is far slower
// than its graphed ceiling, and both reports leave the shared allocator's peaks out.
// Sized to finish in seconds: 3 rounds x 2 sides x (warm-up + 2 windows x 5 batches of 16) is
// about 70 batches (the loop's host resize of 16 images to 224 px dominates, tens of ms each),
// plus one CUDA context and two captures of 3 warm-up steps. No backend.cudnn_benchmark: it
// times every cuDNN algorithm for each convolution shape before the first step, a cost that
// grows with the image size and decides nothing here. (Its time on a GPU is not measured yet: the
// first H200 run cut the whole test binary at 180 s while this test ran.) A hang is cut at 60 s.
TEST_CASE("bottleneck on the GPU: host resizing on the training thread is input-bound", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-bottleneck");
  const std::string config = tbtest::tiny_profile(dir);
  const int limit_s = 60;
  const auto r = tbtest::run_shell(
      "timeout " + std::to_string(limit_s) + " \"$TB\" bottleneck -q -c '" + config + "' --out '" +
      (dir / "neck").string() + "' --rounds 3 --set device=cuda --set data.image_size=224 --set data.source_size=64" +
      " --set train.batch_size=16 --set measure.measured_batches=5 --set backend.cuda_graph=true");
  if (r.code == 124 || r.code == 130) FAIL("bottleneck did not finish within " << limit_s << " s:\n" << r.output);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto verdict = tbtest::read_json(dir / "neck" / "bottleneck.json");
  CHECK(verdict["verdict"] == "INPUT-BOUND");
  CHECK(verdict["hints"].dump().find("data.workers: 0") != std::string::npos);
  for (const char* file : {"loop.json", "ceiling.json"}) {
    const auto report = tbtest::read_json(dir / "neck" / file);
    CHECK(report["status"] == "ok");
    CHECK(report["effective"]["cuda_graph"] == true);
    CHECK(report["results"]["memory"]["device_peak_allocated_bytes"].is_null());
  }
}
