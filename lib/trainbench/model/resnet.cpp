#include "trainbench/model/resnet.hpp"

#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace nn = torch::nn;

basic_block_impl::basic_block_impl(int64_t in, int64_t out, int64_t stride) {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(out));
  conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
  bn2 = register_module("bn2", nn::BatchNorm2d(out));
  if (stride != 1 || in != out) {
    downsample = register_module(
        "downsample",
        nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)), nn::BatchNorm2d(out)));
  }
}

torch::Tensor basic_block_impl::forward(const torch::Tensor& x) {
  torch::Tensor identity = downsample ? downsample->forward(x) : x;
  torch::Tensor y = torch::relu(bn1(conv1(x)));
  return torch::relu(bn2(conv2(y)) + identity);
}

namespace {
nn::Sequential make_layer(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(basic_block(in, out, stride), basic_block(out, out, 1));
}
}  // namespace

resnet_impl::resnet_impl(int64_t num_classes) {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  layer1 = register_module("layer1", make_layer(64, 64, 1));
  layer2 = register_module("layer2", make_layer(64, 128, 2));
  layer3 = register_module("layer3", make_layer(128, 256, 2));
  layer4 = register_module("layer4", make_layer(256, 512, 2));
  fc = register_module("fc", nn::Linear(512, num_classes));
  // torchvision's init: kaiming normal (fan_out, relu) for convs, BN weight 1 / bias 0,
  // Linear keeps its default init.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(b->weight);
      nn::init::zeros_(b->bias);
    }
  }
}

torch::Tensor resnet_impl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::relu(bn1(conv1(x)));
  y = torch::max_pool2d(y, 3, 2, 1);
  y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
  return fc(y);
}

resnet make_resnet(const std::string& arch, std::int64_t num_classes) {
  TB_ASSERT(arch == "resnet18", "model.arch '" + arch + "' passed validation but has no factory entry");
  return resnet(num_classes);
}

std::int64_t parameter_count(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace trainbench
