#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/pipeline.hpp"

using namespace trainbench;

namespace {

// Knows whether a measured window is open.
class window_clock final : public stage_clock {
 public:
  explicit window_clock(bool& open) : open_(open) {}
  void start_window(int batches) override {
    open_ = true;
    inner_->start_window(batches);
  }
  void begin(stage_id s, int batch) override { inner_->begin(s, batch); }
  void end(stage_id s, int batch) override { inner_->end(s, batch); }
  double finish_window(window_times& out) override {
    open_ = false;
    return inner_->finish_window(out);
  }
  const char* kind() const override { return "test"; }

 private:
  bool& open_;
  std::unique_ptr<stage_clock> inner_ = make_host_clock();
};

// A fused step like the CUDA graph's: one-time capture work, in prepare() or, if nobody called
// it, lazily on the first batch.
class capturing_step final : public train_step {
 public:
  capturing_step(const bool& window_open, bool& captured_in_window)
      : window_open_(window_open), captured_in_window_(captured_in_window), model_(make_resnet("resnet18", 10)) {}
  void prepare() override { capture(); }
  void forward(const device_batch&) override {
    capture();
    ++replays;
  }
  void backward() override {}
  void optimizer_step() override {}
  bool fused() const override { return true; }
  at::Tensor last_loss() const override { return at::zeros({}); }
  std::string describe() const override { return "test"; }
  const resnet& model() const override { return model_; }
  int captures = 0, replays = 0;

 private:
  void capture() {
    if (captures > 0) return;
    ++captures;
    if (window_open_) captured_in_window_ = true;
  }
  const bool& window_open_;
  bool& captured_in_window_;
  resnet model_;
};

}  // namespace

TEST_CASE("a fused step is captured before the first measured window, whatever warmup_batches says") {
  for (int warmup : {0, 2}) {
    INFO("warmup_batches " << warmup);
    bool open = false, captured_in_window = false;
    pipeline p;
    p.fixed = {at::zeros({2, 3, 4, 4}), at::zeros({2}, at::kLong), 0, 2};
    auto step = std::make_unique<capturing_step>(open, captured_in_window);
    capturing_step& s = *step;
    p.step = std::move(step);
    p.clock = std::make_unique<window_clock>(open);
    p.probe = std::make_unique<device_probe>();
    measure_config m;
    m.warmup_batches = warmup;
    m.measured_batches = 3;
    m.repeats = 2;
    m.nvtx = nvtx_level::off;
    runner r(p, m);
    r.run();
    CHECK(s.captures == 1);
    CHECK_FALSE(captured_in_window);
    CHECK(s.replays == warmup + 6);
    CHECK(r.result().windows.size() == 2);
    // Named as what it is: one `step` per batch, and no forward, backward or optimizer stages.
    const auto& stages = r.result().stages_s;
    REQUIRE(stages.count("step") == 1);
    CHECK(stages.at("step").size() == 6);
    for (const char* fused : {"forward", "backward", "optimizer"}) CHECK(stages.count(fused) == 0);
  }
}

namespace {

// Every batch the same made-up times: the host's wait for the loader overlaps the device's step.
class overlapping_clock final : public stage_clock {
 public:
  void start_window(int batches) override { batches_ = batches; }
  void begin(stage_id, int) override {}
  void end(stage_id, int) override {}
  double finish_window(window_times& out) override {
    std::array<double, stage_count> row;
    row.fill(-1.0);
    row[static_cast<int>(stage_id::data_wait)] = 3e-3;
    row[static_cast<int>(stage_id::h2d)] = 1e-3;
    row[static_cast<int>(stage_id::forward)] = 2e-3;
    row[static_cast<int>(stage_id::backward)] = 2e-3;
    row[static_cast<int>(stage_id::optimizer)] = 1e-3;
    row[static_cast<int>(stage_id::batch)] = 7.5e-3;
    out.per_batch.assign(static_cast<std::size_t>(batches_), row);
    return 7.5e-3 * batches_;
  }
  const char* kind() const override { return "test"; }

 private:
  int batches_ = 0;
};

}  // namespace

TEST_CASE("stages that add up to more than the batch: the overlap per batch is in the result") {
  pipeline p;
  p.fixed = {at::zeros({2, 3, 4, 4}), at::zeros({2}, at::kLong), 0, 2};
  p.clock = std::make_unique<overlapping_clock>();
  p.probe = std::make_unique<device_probe>();
  measure_config m;
  m.warmup_batches = 0;
  m.measured_batches = 4;
  m.repeats = 2;
  m.nvtx = nvtx_level::off;
  runner r(p, m);
  r.run();
  const auto& o = r.result().stages_overlap_s;
  REQUIRE(o.size() == 8);
  for (double v : o) CHECK(v == Approx(1.5e-3));  // 3 + 1 + 2 + 2 + 1 ms of stages in a 7.5 ms batch
}

namespace {

// Hands back a measured result of no kernels, as a recorder that saw the window would.
class fixed_recorder final : public kernel_recorder {
 public:
  void start() override {}
  kernel_family_result stop(int batches) override {
    kernel_family_result k;
    k.measured = true;
    k.source = "test";
    k.batches = batches;
    return k;
  }
};

}  // namespace

// The families are told apart by kernel name, and the per-parameter SGD's kernels are ATen's
// elementwise ones: a measured result says so, unless the optimizer runs multi-tensor kernels.
TEST_CASE("kernel families say where the per-parameter SGD's kernels count, and nothing of it otherwise") {
  const auto dir = tbtest::scratch("kernels-caveat");
  const std::string file = tbtest::tiny_profile(dir);
  for (const std::string set : {"", "train.optimizer.foreach=true", "backend.compile=true"}) {
    INFO("--set " << set);
    const profile prof = set.empty() ? load_profile(file).value : load_profile(file, {set}).value;
    effective_settings e;
    std::int64_t parameters = 0;
    pipeline p = build_pipeline(prof, build_options{}, e, parameters);
    p.kernels = std::make_unique<fixed_recorder>();  // the CPU records none of its own
    runner r(p, prof.measure);
    r.run();
    REQUIRE(r.result().kernel_families);
    const std::string& source = r.result().kernel_families->source;
    if (set.empty())
      CHECK_THAT(source, Catch::StartsWith("test; the per-parameter SGD") && Catch::Contains("norm_activation"));
    else
      CHECK(source == "test");
  }
}
