// Tests that need a CUDA device. Tagged [gpu]: CPU hosts skip them with `ctest -LE gpu`;
// scripts/gpu-check.sh runs them with `ctest -L gpu`.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/report/ladder.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {
void require_cuda() {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
}

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

pipeline build(const std::string& yaml_extra, const std::vector<std::string>& sets, effective_settings& e) {
  const auto dir = tbtest::scratch("gpu-pipeline");
  tbtest::write_text(dir / "p.yaml",
                     "name: gpu\ndevice: cuda\ndata: {source: synthetic, samples: 512, image_size: 32}\n"
                     "train: {batch_size: 16}\nmeasure: {warmup_batches: 3, measured_batches: 10}\n" +
                         yaml_extra);
  std::int64_t parameters = 0;
  return build_pipeline(load_profile(dir / "p.yaml", sets).value, build_options{}, e, parameters);
}
}  // namespace

TEST_CASE("graphed step matches an eager twin after 5 steps, and its replays keep training", "[gpu]") {
  require_cuda();
  for (amp_mode amp : {amp_mode::off, amp_mode::bf16, amp_mode::fp16}) {
    INFO(to_string(amp));
    const double tol = amp == amp_mode::off ? 1e-4 : 2e-2;  // AMP tolerance: different kernels, same math
    const auto data = batches(6, 32);
    at::manual_seed(0);
    resnet graphed = make_resnet("resnet18", 10), eager = make_resnet("resnet18", 10);
    graphed->to(at::kCUDA);
    eager->to(at::kCUDA);
    {
      at::NoGradGuard g;
      auto pe = eager->parameters(), pg = graphed->parameters();
      for (std::size_t i = 0; i < pe.size(); ++i) pe[i].copy_(pg[i]);
    }
    graphed->eval();
    eager->eval();
    auto gstep = make_graph_step(graphed, cuda_options(amp), {8, 3, 32, 32}, false);
    auto estep = make_eager_step(eager, cuda_options(amp));
    // The capture's eager warm-up steps are undone: both train on the same batches from the start.
    gstep->forward(data[0]);
    estep->forward(data[0]);
    estep->backward();
    estep->optimizer_step();
    const auto before = clones(graphed->parameters());
    for (int i = 1; i < 6; ++i) {
      gstep->forward(data[i]);
      estep->forward(data[i]);
      estep->backward();
      estep->optimizer_step();
    }
    torch::cuda::synchronize();
    const auto pg = clones(graphed->parameters()), pe = clones(eager->parameters());
    bool moved = false;
    for (std::size_t i = 0; i < pg.size(); ++i) {
      CHECK(at::allclose(pg[i], pe[i], tol, tol));
      moved = moved || !at::equal(pg[i], before[i]);
    }
    CHECK(moved);  // replays change the parameters: momentum and grads are live, not frozen
    CHECK(gstep->last_loss().item<double>() == Approx(estep->last_loss().item<double>()).epsilon(tol * 10));
  }
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
  auto p = build("data: {pin_memory: true, workers: 2}\ntransfer: {copy_stream: true, depth: 3}\n", {}, e);
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
    auto p = build("data: {pin_memory: true, workers: 2}\ntransfer: {copy_stream: true, depth: 2}\n",
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
  auto losses = [](const std::string& extra) {
    effective_settings e;
    auto p = build(extra, {}, e);
    measure_config m;
    m.warmup_batches = 1;
    m.measured_batches = 5;
    runner r(p, m);
    r.run();
    return *r.result().loss_last;
  };
  const double blocking = losses("");
  const double overlapped = losses("data: {pin_memory: true}\ntransfer: {copy_stream: true}\n");
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
    // dtype: those notes, as fuse_batch_norm gives them, and nothing else.
    std::vector<std::string> notes;
    if (p.backend.compile) {
      resnet probe = make_resnet(p.model.arch, p.model.num_classes);
      probe->to(at::kCUDA);
      fusion_request fr;
      fr.device = c10::Device(c10::kCUDA, 0);
      fr.amp = p.train.amp;
      fr.channels_last = true;
      fr.input_shape = {p.train.batch_size, 3, p.data.image_size, p.data.image_size};
      for (const auto& f : fuse_batch_norm(probe, fr).ineffective) notes.push_back("backend.compile: " + f);
      CHECK(j["effective"]["compile"].back() == "cuda_graph");
      CHECK(j["effective"]["channels_last"] == true);
    }
    CHECK(j["effective"]["notes"].get<std::vector<std::string>>() == notes);
    CHECK(j["effective"]["cuda_graph"].get<bool>() == (p.backend.cuda_graph || p.backend.compile));
    CHECK(j["effective"]["copy_stream"].get<bool>() == p.transfer.copy_stream);
    CHECK(j["effective"]["pin_memory"].get<bool>() ==
          (p.data.pin_memory && p.data.source != data_source::device_synthetic));
    CHECK(j["effective"]["amp"] == to_string(p.train.amp));
  }
}

// One GPU holds one NCCL rank, so this is the most a single-GPU host can check: the NCCL group is
// built, parameters broadcast, gradients all-reduced from the hooks, windows gathered.
TEST_CASE("a data-parallel run with NCCL and one rank on the GPU", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-nccl");
  const std::string config = tbtest::tiny_profile(dir, "dist: {backend: nccl, timeout_s: 60}\n");
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
}

// Two pipelines on one GPU in one process: a loop that resizes on one host thread is far slower
// than its graphed ceiling, and both reports leave the shared allocator's peaks out.
TEST_CASE("bottleneck on the GPU: host resizing on the training thread is input-bound", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-bottleneck");
  const std::string config = tbtest::tiny_profile(dir);
  const auto r = tbtest::run_cli("bottleneck -q -c '" + config + "' --out '" + (dir / "neck").string() +
                                 "' --rounds 3 --set device=cuda --set data.image_size=224 --set data.source_size=64" +
                                 " --set train.batch_size=16 --set measure.measured_batches=5" +
                                 " --set backend.cuda_graph=true --set backend.cudnn_benchmark=true");
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
