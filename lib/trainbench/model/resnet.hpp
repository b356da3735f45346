#pragma once
// The ResNet family with torchvision's module tree, state-dict names and initialisation, made by
// name (the table of architectures is model/resnet_spec.hpp).
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>

#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/resnet_spec.hpp"

namespace trainbench {

// torchvision.models.ResNet: stem, layer1..layer4 of basic or bottleneck blocks, average pool,
// fc. The module's name() is the architecture's (weights errors quote it).
class resnet_impl : public torch::nn::Module {
 public:
  resnet_impl(const resnet_spec& spec, int64_t num_classes, bool zero_init_residual);
  torch::Tensor forward(const torch::Tensor& x);
  // Every block's "batch norm, ReLU" and "batch norm, add, ReLU" (and the stem's) run through
  // `ops` from now on; the unfused ops until then.
  void set_batch_norm_ops(const std::shared_ptr<batch_norm_ops>& ops);
  const std::shared_ptr<batch_norm_ops>& batch_norm_ops_in_use() const { return ops_; }
  // backend.pad_stem: the stem convolution runs on its input and weights padded from 3 to 4
  // channels of zeros. The parameter stays 3 channels (state dict, optimizer, parameter count);
  // the zero channel adds exact zeros, so the model computes the same function.
  void set_stem_padded(bool on) { pad_stem_ = on; }
  bool stem_padded() const { return pad_stem_; }

 private:
  torch::Tensor stem(const torch::Tensor& x);

  std::shared_ptr<batch_norm_ops> ops_ = unfused_batch_norm_ops();
  bool pad_stem_ = false;
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE_IMPL(resnet, resnet_impl);

// The model factory: every architecture model.arch accepts is made here, by its torchvision name.
// zero_init_residual: the last batch norm of every residual branch starts at weight 0, as
// torchvision's flag of that name (each block then starts as the identity). An unknown name
// throws config_error for model.arch, listing the names.
resnet make_resnet(const std::string& arch, std::int64_t num_classes, bool zero_init_residual = false);

std::int64_t parameter_count(torch::nn::Module& m);

// model.channels_last's weights: every 4-d parameter (the convolutions') in NHWC. The data is
// swapped under each parameter (set_data), so the module keeps its parameter tensors.
void weights_to_channels_last(torch::nn::Module& m);

}  // namespace trainbench
