#pragma once
// ResNets with torchvision's module tree, state-dict names and initialisation, made by name.
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

namespace trainbench {

class basic_block_impl : public torch::nn::Module {
 public:
  basic_block_impl(int64_t in, int64_t out, int64_t stride);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE_IMPL(basic_block, basic_block_impl);

class resnet_impl : public torch::nn::Module {
 public:
  explicit resnet_impl(int64_t num_classes);  // ResNet-18
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE_IMPL(resnet, resnet_impl);

// The model factory: every architecture model.arch accepts is made here, by its torchvision name.
resnet make_resnet(const std::string& arch, std::int64_t num_classes);

std::int64_t parameter_count(torch::nn::Module& m);

}  // namespace trainbench
