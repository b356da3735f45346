#include "trainbench/model/resnet.hpp"

#include <ATen/autocast_mode.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/init.h>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace nn = torch::nn;

namespace {

constexpr int64_t stem_stride = 2, stem_padding = 3;  // torchvision's 7 x 7 stem convolution

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t groups = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).groups(groups).bias(false));
}

// The downsample branch, a 1x1 convolution and a batch norm: kept as torchvision's Sequential for
// its parameter names (downsample.0, downsample.1), its batch norm run through the block's ops.
// Holds the downsample's modules by pointer, as the block's own members hold conv1 and bn1: a
// replace_module() of downsample.0 or .1, or a clone() that does not rebuild the block, would leave
// these pointing at the old modules. The model does neither (fusion swaps the ops, not modules).
class shortcut {
 public:
  explicit shortcut(const nn::Sequential& down) {
    if (!down) return;
    conv_ = std::dynamic_pointer_cast<nn::Conv2dImpl>(down->ptr(0));
    bn_ = std::dynamic_pointer_cast<nn::BatchNorm2dImpl>(down->ptr(1));
    TB_ASSERT(conv_ && bn_, "a downsample branch is a convolution, then a batch norm");
  }
  torch::Tensor operator()(batch_norm_ops& ops, const torch::Tensor& x) const {
    return bn_ ? ops.batch_norm(*bn_, conv_->forward(x)) : x;
  }

 private:
  std::shared_ptr<nn::Conv2dImpl> conv_;
  std::shared_ptr<nn::BatchNorm2dImpl> bn_;
};

// Batch norm with ReLU, with the residual add and ReLU, and the downsample's batch norm, through
// the model's batch_norm_ops: by default torchvision's in-place ReLU and add (ReLU(inplace=True),
// out += identity).
class basic_block_impl : public nn::Module {
 public:
  basic_block_impl(int64_t in, int64_t planes, int64_t stride, nn::Sequential downsample_)
      : identity(downsample_) {
    conv1 = register_module("conv1", conv(in, planes, 3, stride));
    bn1 = register_module("bn1", nn::BatchNorm2d(planes));
    conv2 = register_module("conv2", conv(planes, planes, 3));
    bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    if (downsample_) downsample = register_module("downsample", downsample_);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor y = ops->bn_relu_conv(*bn1, *conv2, {conv1(x), {}, {}}).y;
    return ops->bn_add_relu(*bn2, y, identity(*ops, x));
  }
  nn::BatchNorm2d last_bn() const { return bn2; }
  std::shared_ptr<batch_norm_ops> ops = unfused_batch_norm_ops();

 private:
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential downsample{nullptr};
  shortcut identity;
};
TORCH_MODULE_IMPL(basic_block, basic_block_impl);

// torchvision's Bottleneck: 1x1 reduce, 3x3 (grouped, carrying the stride: "ResNet v1.5"), 1x1
// expand by 4.
class bottleneck_impl : public nn::Module {
 public:
  bottleneck_impl(int64_t in, int64_t planes, int64_t stride, int64_t groups, int64_t width_per_group,
                  nn::Sequential downsample_)
      : identity(downsample_) {
    const int64_t mid = planes * width_per_group / 64 * groups;
    conv1 = register_module("conv1", conv(in, mid, 1));
    bn1 = register_module("bn1", nn::BatchNorm2d(mid));
    conv2 = register_module("conv2", conv(mid, mid, 3, stride, groups));
    bn2 = register_module("bn2", nn::BatchNorm2d(mid));
    conv3 = register_module("conv3", conv(mid, planes * 4, 1));
    bn3 = register_module("bn3", nn::BatchNorm2d(planes * 4));
    if (downsample_) downsample = register_module("downsample", downsample_);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const conv_output y = ops->bn_relu_conv(*bn2, *conv3, ops->bn_relu_conv(*bn1, *conv2, {conv1(x), {}, {}}));
    return ops->bn_add_relu(*bn3, y.y, identity(*ops, x));
  }
  nn::BatchNorm2d last_bn() const { return bn3; }
  std::shared_ptr<batch_norm_ops> ops = unfused_batch_norm_ops();

 private:
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  nn::Sequential downsample{nullptr};
  shortcut identity;
};
TORCH_MODULE_IMPL(bottleneck, bottleneck_impl);

// torchvision's _make_layer; `in` moves on to the layer's output channels.
nn::Sequential make_layer(const resnet_spec& spec, int64_t& in, int64_t planes, int blocks, int64_t stride) {
  const bool basic = spec.block == resnet_block::basic;
  const int64_t out = planes * (basic ? 1 : 4);
  nn::Sequential layer;
  for (int i = 0; i < blocks; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    nn::Sequential down{nullptr};
    if (i == 0 && (stride != 1 || in != out)) down = nn::Sequential(conv(in, out, 1, stride), nn::BatchNorm2d(out));
    if (basic)
      layer->push_back(basic_block(in, planes, s, down));
    else
      layer->push_back(bottleneck(in, planes, s, spec.groups, spec.width_per_group, down));
    in = out;
  }
  return layer;
}

}  // namespace

resnet_impl::resnet_impl(const resnet_spec& spec, int64_t num_classes, bool zero_init_residual)
    : nn::Module(spec.name) {
  TB_ASSERT(spec.block == resnet_block::bottleneck || (spec.groups == 1 && spec.width_per_group == 64),
            std::string("basic blocks have no groups or width (torchvision refuses them too): ") + spec.name);
  conv1 = register_module(
      "conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(stem_stride).padding(stem_padding).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  int64_t in = 64;
  layer1 = register_module("layer1", make_layer(spec, in, 64, spec.layers[0], 1));
  layer2 = register_module("layer2", make_layer(spec, in, 128, spec.layers[1], 2));
  layer3 = register_module("layer3", make_layer(spec, in, 256, spec.layers[2], 2));
  layer4 = register_module("layer4", make_layer(spec, in, 512, spec.layers[3], 2));
  fc = register_module("fc", nn::Linear(in, num_classes));
  // torchvision's init: kaiming normal (fan_out, relu) for convs, BN weight 1 / bias 0,
  // Linear keeps its default init (the same in LibTorch as in PyTorch).
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* b = m->as<nn::BatchNorm2d>()) {
      nn::init::ones_(b->weight);
      nn::init::zeros_(b->bias);
    }
  }
  if (!zero_init_residual) return;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* b = m->as<basic_block_impl>()) nn::init::zeros_(b->last_bn()->weight);
    if (auto* b = m->as<bottleneck_impl>()) nn::init::zeros_(b->last_bn()->weight);
  }
}

void resnet_impl::set_batch_norm_ops(const std::shared_ptr<batch_norm_ops>& ops) {
  TB_ASSERT(ops != nullptr, "set_batch_norm_ops: no ops");
  ops_ = ops;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* b = m->as<basic_block_impl>()) b->ops = ops;
    if (auto* b = m->as<bottleneck_impl>()) b->ops = ops;
  }
}

// The padded channel is zeros in the input and in the weights, so it adds exact zeros to every
// output, and the weights' gradient reaches only the three real channels (the pad's backward is a
// slice). The batch is written into its padded copy in the dtype autocast gives the convolution
// (a float batch is cast on the way, not padded in float and cast again), in its memory format:
// cuDNN's NHWC kernels need it. The weight is small; autocast casts its padded copy.
torch::Tensor resnet_impl::stem(const torch::Tensor& x) {
  if (!pad_stem_) return conv1(x);
  const c10::DeviceType where = x.device().type();
  const bool cast = at::autocast::is_autocast_enabled(where) && at::isFloatingType(x.scalar_type());
  at::Tensor x4 = at::empty({x.size(0), 4, x.size(2), x.size(3)},
                            x.options()
                                .dtype(cast ? at::autocast::get_autocast_dtype(where) : x.scalar_type())
                                .memory_format(x.suggest_memory_format()));
  x4.narrow(1, 3, 1).zero_();
  x4.narrow(1, 0, 3).copy_(x);
  const at::Tensor& w = conv1->weight;
  const at::Tensor w4 = at::constant_pad_nd(w, {0, 0, 0, 0, 0, 1}).contiguous(w.suggest_memory_format());
  return at::conv2d(x4, w4, {}, stem_stride, stem_padding);
}

torch::Tensor resnet_impl::forward(const torch::Tensor& x) {
  torch::Tensor y = ops_->bn_relu(*bn1, stem(x));
  y = torch::max_pool2d(y, 3, 2, 1);
  y = layer4->forward(layer3->forward(layer2->forward(layer1->forward(y))));
  y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
  return fc(y);
}

resnet make_resnet(const std::string& arch, std::int64_t num_classes, bool zero_init_residual) {
  const resnet_spec* spec = find_resnet_spec(arch);
  if (!spec) throw config_error("", "model.arch", unknown_arch_message(arch));
  return resnet(*spec, num_classes, zero_init_residual);
}

std::int64_t parameter_count(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

void weights_to_channels_last(torch::nn::Module& m) {
  for (auto& p : m.parameters())
    if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
}

}  // namespace trainbench
