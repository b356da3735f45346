// The report's compute block: model FLOP/s and the share of a known GPU's tensor-core peak.
#include <catch2/catch.hpp>

#include "trainbench/report/gpu_peak.hpp"
#include "trainbench/report/report.hpp"

using namespace trainbench;

TEST_CASE("the peak table recognises device names as CUDA reports them, and nothing else") {
  const std::vector<std::pair<const char*, double>> known = {
      {"NVIDIA A100-SXM4-80GB", 312e12},
      {"NVIDIA A100 80GB PCIe", 312e12},
      {"NVIDIA A100-SXM4-40GB", 312e12},
      {"NVIDIA H100 80GB HBM3", 989.4e12},
      {"NVIDIA H100 PCIe", 756e12},
      {"NVIDIA H100 NVL", 835.5e12},
      {"NVIDIA H200", 989.4e12},
      {"NVIDIA H200 NVL", 835.5e12},
      {"NVIDIA L4", 121e12},
      {"NVIDIA GeForce RTX 4090", 165.2e12},
      {"Tesla V100-SXM2-16GB", 125e12},
      {"Tesla V100-PCIE-32GB", 112e12},
  };
  for (const auto& [name, peak] : known) {
    INFO(name);
    const auto p = dense_tensor_peak(name);
    REQUIRE(p);
    CHECK(p->flops_per_s == Approx(peak));
    CHECK_FALSE(p->source.empty());
  }
  for (const char* name : {"NVIDIA L40S", "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4080", "cpu", ""}) {
    INFO(name);
    CHECK_FALSE(dense_tensor_peak(name));
  }
}

TEST_CASE("compute block: 3 x forward FLOPs x median samples/s, against the peak of every device") {
  report_input in;
  in.prof.model.arch = "resnet50";
  in.prof.model.num_classes = 1000;
  in.prof.data.image_size = 224;
  in.parameters = 25557032;
  in.effective.device = "cuda:0";
  in.effective.device_name = "NVIDIA A100-SXM4-80GB";
  // NVIDIA's published ResNet-50 AMP figure on an A100 80 GB.
  in.result.windows = {{2470, 1.0, 2400.0}, {2470, 1.0, 2470.0}, {2470, 1.0, 2500.0}};
  auto c = compute_block(in);
  CHECK(c["train_flops_per_sample"].get<double>() == 3 * 8178368512.0);
  CHECK(c["model_flops_per_s"].get<double>() == Approx(2470 * 3 * 8178368512.0));
  CHECK(c["peak_gpu"] == "A100");
  CHECK(c["share_of_peak"].get<double>() == Approx(2470 * 3 * 8178368512.0 / 312e12));  // about 19%
  const auto report = make_report(in);
  CHECK(report["model"]["forward_flops_per_sample"].get<double>() == 8178368512.0);
  CHECK(report["results"]["compute"] == c);

  dist_result d;
  d.world = 2;
  d.ranks_in_results = 2;  // the ranks' windows gathered: two devices' samples
  in.result.dist = d;
  CHECK(compute_block(in)["share_of_peak"].get<double>() == Approx(c["share_of_peak"].get<double>() / 2));
  // Not gathered (a failed or interrupted run): one rank's windows against one device's peak.
  in.result.dist->ranks_in_results = 1;
  CHECK(compute_block(in)["share_of_peak"].get<double>() == Approx(c["share_of_peak"].get<double>()));
  in.result.dist = d;

  in.effective.device = "cpu";
  in.effective.device_name = "cpu";
  c = compute_block(in);
  CHECK(c["peak_flops_per_s"].is_null());
  CHECK(c["share_of_peak"].is_null());
  in.result.windows.clear();
  CHECK(compute_block(in).is_null());
  in.parameters = 0;  // bench-data: no model
  CHECK(make_report(in)["model"]["forward_flops_per_sample"].is_null());
}
