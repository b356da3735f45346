// The convolution fusions' arithmetic (model/conv_fusion.hpp) on the CPU: composed as the fused
// graphs compose it, it is one training step of conv(relu(batch_norm(x))), held to autograd in
// float64. The cuDNN graphs (cuda/cudnn_conv_fusion.hpp) are held to these functions on a GPU.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <catch2/catch.hpp>

#include "model/conv_fusion_cases.hpp"
#include "trainbench/cuda/cudnn_conv_fusion.hpp"
#include "trainbench/model/conv_fusion.hpp"
#include "trainbench/model/resnet.hpp"

using namespace trainbench;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

struct case_shape {
  std::int64_t c, k, r;
  conv_geometry g;
};

}  // namespace

TEST_CASE("convolution fusions: finalize, scale-bias-ReLU conv with genstats, dgrad with dReLU and dBN weight, "
          "scale-bias-ReLU wgrad and the dBN apply compose to the step of conv(relu(batch_norm(x)))",
          "[model][conv_fusion]") {
  const double eps = 1e-5;
  for (const case_shape s : {case_shape{8, 6, 3, {1, 1}}, case_shape{8, 12, 3, {2, 1}}, case_shape{8, 16, 1, {1, 0}}}) {
    CAPTURE(s.c, s.k, s.r, s.g.stride, s.g.padding);
    at::manual_seed(5);
    const auto opts = at::TensorOptions().dtype(at::kDouble);
    const at::Tensor x = at::randn({4, s.c, 6, 6}, opts).contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor gamma = at::rand({s.c}, opts) + 0.5, beta = at::randn({s.c}, opts) * 0.3;
    const at::Tensor w = at::randn({s.k, s.c, s.r, s.r}, opts) * 0.2;

    // Autograd of the unfused step.
    const at::Tensor xv = x.clone().requires_grad_(), gv = gamma.clone().requires_grad_(),
                     bv = beta.clone().requires_grad_(), wv = w.clone().requires_grad_();
    const at::Tensor a = at::relu(at::batch_norm(xv, gv, bv, {}, {}, true, 0.1, eps, false));
    const at::Tensor y = at::conv2d(a, wv, {}, s.g.stride, s.g.padding);
    const at::Tensor dy = at::randn(y.sizes(), opts);
    y.backward(dy);

    // The same step as the fused graphs run it: the statistics come as a sum and a sum of squares
    // (the previous convolution's genstats; here taken from x).
    const std::int64_t m = x.numel() / s.c;
    const bn_finalized f = bn_finalize_reference(x.sum({0, 2, 3}), (x * x).sum({0, 2, 3}), m, gamma, beta, eps);
    const conv_genstats fwd = sbr_conv_genstats_reference(x, f.eq_scale, f.eq_bias, w, s.g);
    CHECK(max_diff(fwd.y, y) < 1e-10);
    CHECK(max_diff(fwd.sum, y.sum({0, 2, 3})) < 1e-9);
    CHECK(max_diff(fwd.sq_sum, (y * y).sum({0, 2, 3})) < 1e-9);

    const dgrad_dbn d = dgrad_drelu_dbn_weight_reference(dy, w, x, f.mean, f.inv_std, gamma, beta, s.g);
    const at::Tensor dw = sbr_wgrad_reference(x, f.eq_scale, f.eq_bias, dy, w, s.g);
    const at::Tensor dx = dbn_apply_reference(d.dz, x, d.eq_dy, d.eq_x, d.eq_b);
    CHECK(max_diff(dx, xv.grad()) < 1e-10);
    CHECK(max_diff(dw, wv.grad()) < 1e-10);
    CHECK(max_diff(d.dgamma, gv.grad()) < 1e-10);
    CHECK(max_diff(d.dbeta, bv.grad()) < 1e-10);
    CHECK(dx.is_contiguous(at::MemoryFormat::ChannelsLast));
    // The ReLU's gradient is not trivially all-pass here: a fair share of the activations is clipped.
    const double clipped = (d.dz == 0).to(at::kDouble).mean().item<double>();
    CHECK(clipped > 0.2);
    CHECK(clipped < 0.8);
  }
}

TEST_CASE("convolution fusions: the reference computes half-precision tensors in float32 and returns their dtype",
          "[model][conv_fusion]") {
  at::manual_seed(6);
  const at::Tensor x = at::randn({2, 8, 4, 4}).to(at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor w = (at::randn({8, 8, 3, 3}) * 0.2).to(at::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor ones = at::ones({8}), zeros = at::zeros({8});
  const conv_genstats fwd = sbr_conv_genstats_reference(x, ones, zeros, w, {1, 1});
  CHECK(fwd.y.scalar_type() == at::kBFloat16);
  CHECK(fwd.sum.scalar_type() == at::kFloat);
  const dgrad_dbn d = dgrad_drelu_dbn_weight_reference(fwd.y, w, x, zeros, ones, ones, zeros, {1, 1});
  CHECK(d.dz.scalar_type() == at::kBFloat16);
  CHECK(d.dgamma.scalar_type() == at::kFloat);
  const at::Tensor dx = dbn_apply_reference(d.dz, x, d.eq_dy, d.eq_x, d.eq_b);
  CHECK(dx.scalar_type() == at::kBFloat16);
  CHECK(max_diff(dbn_apply_reference(d.dz, x, ones, zeros, zeros), d.dz) == 0.0);
}

TEST_CASE("convolution fusions: the pairs of a batch norm and the convolution its ReLU feeds, with their shapes",
          "[model][conv_fusion]") {
  resnet r18 = make_resnet("resnet18", 10);
  const std::vector<conv_fusion_site> basic = conv_fusion_sites(r18, {16, 3, 64, 64});
  REQUIRE(basic.size() == 8);  // conv2 of each of the 8 basic blocks
  CHECK(basic.front().name == "layer1.0.conv2");
  CHECK(basic.front().input == std::vector<std::int64_t>{16, 64, 16, 16});
  CHECK(basic.back().name == "layer4.1.conv2");
  CHECK(basic.back().input == std::vector<std::int64_t>{16, 512, 2, 2});
  for (const conv_fusion_site& s : basic) CHECK(s.bn->options.num_features() == s.conv->options.in_channels());

  resnet r50 = make_resnet("resnet50", 10);
  const std::vector<conv_fusion_site> bottleneck = conv_fusion_sites(r50, {2, 3, 64, 64});
  REQUIRE(bottleneck.size() == 32);  // conv2 and conv3 of each of the 16 bottlenecks
  CHECK(bottleneck[0].name == "layer1.0.conv2");
  CHECK(bottleneck[1].name == "layer1.0.conv3");
  CHECK(bottleneck[1].input == std::vector<std::int64_t>{2, 64, 16, 16});
  // torchvision's v1.5 bottleneck strides in conv2: layer2's first conv2 sees 16x16, its conv3 8x8.
  CHECK(bottleneck[6].name == "layer2.0.conv2");
  CHECK(bottleneck[6].input == std::vector<std::int64_t>{2, 128, 16, 16});
  CHECK(bottleneck[7].input == std::vector<std::int64_t>{2, 128, 8, 8});

  // ResNeXt's grouped conv2 is left out; its conv3 stays.
  resnet x50 = make_resnet("resnext50_32x4d", 10);
  const std::vector<conv_fusion_site> grouped = conv_fusion_sites(x50, {2, 3, 64, 64});
  REQUIRE(grouped.size() == 16);
  for (const conv_fusion_site& s : grouped) CHECK(s.name.find("conv3") != std::string::npos);
}

TEST_CASE("convolution fusions: the cuDNN graphs pass the frontend's own checks for ResNet's geometries and dtypes, "
          "without a GPU",
          "[model][conv_fusion]") {
  for (const at::ScalarType t : {at::kHalf, at::kBFloat16, at::kFloat}) {
    for (const tbtest::conv_case g :
         {tbtest::conv_case{64, 56, 64, 3, 1, 1}, tbtest::conv_case{128, 56, 128, 3, 2, 1},
          tbtest::conv_case{64, 56, 256, 1, 1, 0}, tbtest::conv_case{512, 7, 2048, 1, 1, 0}}) {
      const conv_fusion_shape s = tbtest::conv_fusion_shape_of(g, t, 32);
      CAPTURE(c10::toString(t), g.c, g.h, g.k, g.r, g.stride);
      const std::string why = cudnn_conv_fusion::check_graphs(s);
      if (why.find("headers were not found") != std::string::npos || why.find("without CUDA") != std::string::npos) {
        WARN("not checked: " << why);
        return;
      }
      CHECK(why == "");
    }
  }
}

TEST_CASE("convolution fusions: the pairs grouped by shape, largest share of the convolution work first",
          "[model][conv_fusion]") {
  resnet r50 = make_resnet("resnet50", 10);
  const std::vector<conv_fusion_group> groups =
      conv_fusion_groups(conv_fusion_sites(r50, {256, 3, 224, 224}), at::kHalf);
  // Per layer: conv2 (layer2-4: the first block's strided one apart), conv3.
  REQUIRE(groups.size() == 11);
  std::size_t layers = 0;
  double last = 1e300;
  for (const conv_fusion_group& g : groups) {
    const conv_fusion_shape& s = g.shape;
    CAPTURE(g.layers.front());
    layers += g.layers.size();
    CHECK(s.dtype == at::kHalf);
    CHECK(s.n == 256);
    CHECK(s.eps == 1e-5);
    CHECK(s.momentum == 0.1);
    CHECK(g.conv->options.in_channels() == s.c);
    const double work = static_cast<double>(g.layers.size()) * s.k * s.c * s.r * s.r * s.out_h() * s.out_w();
    CHECK(work <= last);
    last = work;
  }
  CHECK(layers == 32);
  // layer3's five unstrided conv2 (256 -> 256, 3 x 3 at 14 x 14) lead: 5 x 256 x 256 x 9 x 196
  // multiply-adds per image against layer1's three conv2 at 3 x 64 x 64 x 9 x 3136.
  CHECK(groups.front().layers ==
        std::vector<std::string>{"layer3.1.conv2", "layer3.2.conv2", "layer3.3.conv2", "layer3.4.conv2",
                                 "layer3.5.conv2"});
  CHECK(groups.front().shape.out_h() == 14);
}
