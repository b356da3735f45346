// results.kernel_families: the kernel-name rules on names as CUPTI reports them, the sums and
// shares, pooling over processes, and what a CPU run says (not measured, and why). The CUDA
// recorder's own check is in tests/gpu/test_gpu_compile.cpp.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "trainbench/measure/kernel_families.hpp"
#include "trainbench/report/pooling.hpp"
#include "trainbench/report/report.hpp"

using namespace trainbench;

TEST_CASE("kernel names fall into the families: convolution, normalisation and activation, optimizer, other") {
  const std::pair<const char*, kernel_family> cases[] = {
      {"sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_cluster1x1x1",
       kernel_family::convolution},
      {"sm80_xmma_dgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc", kernel_family::convolution},
      {"sm80_xmma_wgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", kernel_family::convolution},
      {"void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*)",
       kernel_family::convolution},
      {"void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int)",
       kernel_family::convolution},
      {"void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, false, "
       "true>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>)",
       kernel_family::convolution},
      {"void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, int, 512, true, 1>(cudnnTensorStruct, __half const*)",
       kernel_family::norm_activation},
      {"void cudnn::bn_bw_1C11_kernel_new<__half, float, float2, 512, true, 1>(__half, __half)",
       kernel_family::norm_activation},
      {"void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, c10::Half, float, "
       "4>(c10::Half const*)",
       kernel_family::norm_activation},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
       "namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
       "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() "
       "const::{lambda(c10::Half)#1}, std::array<char*, 2ul> >(int, ...)",
       kernel_family::norm_activation},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous "
       "namespace)::threshold_kernel_impl<c10::Half>(at::TensorIteratorBase&, c10::Half, "
       "c10::Half)::{lambda(c10::Half, c10::Half)#1}, std::array<char*, 3ul> >(int, ...)",
       kernel_family::norm_activation},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::Half>, std::array<char*, "
       "3ul> >(int, at::native::CUDAFunctor_add<c10::Half>, std::array<char*, 3ul>)",
       kernel_family::norm_activation},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
       "namespace)::FusedSgdMathFunctor<float, 3>>(...)",
       kernel_family::optimizer},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
       "namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::UnaryOpScalarTensorFunctor<float, 1, 1, "
       "0>>(...)",
       kernel_family::optimizer},
      {"void at::native::amp_update_scale_cuda_kernel(float*, int*, float const*, double, double, int)",
       kernel_family::optimizer},
      {"void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::Half, float>(c10::Half const*, int)",
       kernel_family::other},
      {"sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
       "cublas",
       kernel_family::other},
      {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::Half, float, float>(float*, c10::Half "
       "const*, int)",
       kernel_family::other},
      {"void "
       "at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()"
       "#3}>(...)",
       kernel_family::other},
      // A parameter's type is not the kernel's family: the fused crop takes a normalizer.
      {"void trainbench::(anonymous namespace)::fused_crop_kernel<c10::Half>(unsigned char const*, "
       "trainbench::fused_crop_job const*, c10::Half*, trainbench::fused_crop_normalizer, int, int, int)",
       kernel_family::other},
      {"void foo_kernel(cudnn::conv_params, float*)", kernel_family::other},
      {"void at::native::(anonymous namespace)::upsample_bilinear2d_aa_out_frame<float, float>(int, int, "
       "at::GenericPackedTensorAccessor<float, 4ul, at::DefaultPtrTraits, long>)",
       kernel_family::other},
      // Unbalanced or no parameter list: the whole name is read.
      {"bn_fw_kernel)", kernel_family::norm_activation},
      {"relu_kernel(", kernel_family::norm_activation},
  };
  for (const auto& [name, family] : cases) {
    INFO(name);
    CHECK(kernel_family_name(classify_kernel(name)) == std::string(kernel_family_name(family)));
  }
  CHECK(host_device_copy("Memcpy HtoD (Pinned -> Device)"));
  CHECK_FALSE(host_device_copy("Memcpy DtoD (Device -> Device)"));
}

TEST_CASE(
    "kernel family sums leave out host-device copies, and pooling adds measured rounds and keeps the reason of none") {
  const std::vector<kernel_record> records{{"sm90_xmma_fprop_implicit_gemm_f16", 0.006},
                                           {"cudnn::bn_fw_tr_1C11_kernel_NHWC", 0.002},
                                           {"multi_tensor_apply_kernel<FusedSgdMathFunctor>", 0.001},
                                           {"max_pool_forward_nhwc", 0.001},
                                           {"Memcpy HtoD (Pinned -> Device)", 0.5}};
  const kernel_family_result k = sum_kernel_families(records, 2, "test");
  CHECK(k.measured);
  CHECK(k.kernels == 4);
  CHECK(k.batches == 2);
  CHECK(k.seconds.at("convolution") == Approx(0.006));
  CHECK(k.seconds.at("norm_activation") == Approx(0.002));
  CHECK(k.seconds.at("optimizer") == Approx(0.001));
  CHECK(k.seconds.at("other") == Approx(0.001));
  CHECK_FALSE(sum_kernel_families({{"Memcpy DtoH (Device -> Pinned)", 1.0}}, 2, "test").measured);

  run_result a, b, none;
  a.kernel_families = k;
  b.kernel_families = k;
  none.kernel_families = kernel_family_result{};
  none.kernel_families->reason = "why not";
  const run_result pooled =
      pool_rounds({run_result_from_json(run_result_to_json(none)), run_result_from_json(run_result_to_json(a)),
                   run_result_from_json(run_result_to_json(b))});
  REQUIRE(pooled.kernel_families);
  CHECK(pooled.kernel_families->measured);
  CHECK(pooled.kernel_families->batches == 4);
  CHECK(pooled.kernel_families->seconds.at("convolution") == Approx(0.012));
  const run_result unmeasured = pool_rounds({none, none});
  CHECK_FALSE(unmeasured.kernel_families->measured);
  CHECK(unmeasured.kernel_families->reason == "why not");
  // The names behind each family survive the state file and add up when pooled.
  const auto& conv = pooled.kernel_families->top.at("convolution");
  REQUIRE(conv.size() == 1);
  CHECK(conv[0].name == "sm90_xmma_fprop_implicit_gemm_f16");
  CHECK(conv[0].seconds == Approx(0.012));
  CHECK(conv[0].kernels == 2);
  report_input in;
  in.result = pooled;
  const nlohmann::ordered_json report = make_report(in)["results"]["kernel_families"];
  CHECK(report["top"]["norm_activation"][0]["name"] == "cudnn::bn_fw_tr_1C11_kernel_NHWC");
  CHECK(report["top"]["norm_activation"][0]["s_per_batch"].get<double>() == Approx(0.004 / 4));
  CHECK(report["top"]["norm_activation"][0]["kernels_per_batch"].get<double>() == Approx(0.5));
  CHECK(report["dropped_records"] == 0);
}

TEST_CASE("the run's summary gives the kernel time per batch, every family's share and the longest kernel") {
  const std::vector<kernel_record> records{{"sm90_xmma_fprop_implicit_gemm_f16", 0.006},
                                           {"sm90_xmma_dgrad_implicit_gemm_f16", 0.004},
                                           {"cudnn::bn_fw_tr_1C11_kernel_NHWC", 0.008},
                                           {"max_pool_forward_nhwc", 0.002}};
  const std::vector<std::string> lines = describe_kernel_families(sum_kernel_families(records, 2, "test", 1));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] ==
        "10.00 ms of kernels per batch: convolution 50.0%, norm_activation 40.0%, optimizer 0.0%, other 10.0%");
  CHECK(lines[1] == "longest: sm90_xmma_fprop_implicit_gemm_f16 (3.000 ms per batch, convolution)");
  CHECK(lines[2] == "1 records with timestamps outside the trace left out");
  kernel_family_result none;
  none.reason = "the device is cpu";
  CHECK(describe_kernel_families(none).empty());
}

TEST_CASE("each family keeps its five longest kernel names, longest first, names cut to 160 characters") {
  std::vector<kernel_record> records;
  for (int i = 0; i < 7; ++i) records.push_back({"relu_kernel_" + std::to_string(i), 0.001 * (i + 1)});
  records.push_back({"relu_kernel_6", 0.0005});  // the same name twice: one entry, its times added
  records.push_back({"batchnorm_" + std::string(400, 'x'), 0.0001});
  const kernel_family_result k = sum_kernel_families(records, 1, "test", 3);
  CHECK(k.dropped == 3);
  const auto& tops = k.top.at("norm_activation");
  REQUIRE(tops.size() == kernel_tops);
  CHECK(tops[0].name == "relu_kernel_6");
  CHECK(tops[0].seconds == Approx(0.0075));
  CHECK(tops[0].kernels == 2);
  for (std::size_t i = 1; i < tops.size(); ++i) CHECK(tops[i - 1].seconds >= tops[i].seconds);
  CHECK(k.top.at("convolution").empty());
  std::vector<kernel_top> merged = tops;
  merge_kernel_tops(merged, {{"batchnorm_" + std::string(150, 'x'), 1.0, 1}});
  REQUIRE(merged.size() == kernel_tops);
  CHECK(merged[0].name.size() == kernel_top_name_chars);
  const kernel_family_result none = sum_kernel_families({}, 1, "test", 2);
  CHECK_FALSE(none.measured);
  CHECK(none.reason.find("2 records with timestamps outside the trace") != std::string::npos);
}

TEST_CASE("a CPU run's report says the kernel families are not measured and why, and the key turns them off") {
  const auto dir = tbtest::scratch("kernel-families-cpu");
  const auto file = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run -q --config '" + file + "' --set measure.repeats=1").code == 0);
  auto j = tbtest::read_json(dir / "tiny.json");
  const auto& k = j["results"]["kernel_families"];
  CHECK(k["measured"] == false);
  CHECK(k["reason"].get<std::string>().find("the device is cpu") == 0);
  REQUIRE(tbtest::run_cli("run -q --config '" + file + "' --set measure.repeats=1 --set measure.kernel_families=false")
              .code == 0);
  j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["results"]["kernel_families"].is_null());
}
