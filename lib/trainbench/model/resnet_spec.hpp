#pragma once
// The ResNet family as torchvision defines it: one table row per model.arch (no torch here, so
// config validation and the report read the same list the model factory builds from).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace trainbench {

enum class resnet_block { basic, bottleneck };

struct resnet_spec {
  const char* name;
  resnet_block block;
  std::array<int, 4> layers;  // blocks in layer1..layer4
  int groups = 1;             // of the bottleneck's 3x3 convolution (ResNeXt's cardinality)
  int width_per_group = 64;   // torchvision's base_width: 64 plain, 4 or 8 ResNeXt, 128 wide
};

// Every architecture model.arch accepts, in torchvision's order.
const std::vector<resnet_spec>& resnet_specs();
// nullptr when the name is not in the table.
const resnet_spec* find_resnet_spec(const std::string& arch);
std::vector<std::string> model_arch_names();
// "unknown value 'x'; did you mean 'y'? allowed: ...": the one wording for a bad model.arch.
std::string unknown_arch_message(const std::string& arch);

// FLOPs of one forward pass of one sample of 3 x height x width, from the layer shapes:
// 2 x the multiply-adds of every convolution and of the final linear layer. Batch norm, ReLU,
// pooling and the residual additions are not counted (torch.utils.flop_counter.FlopCounterMode
// counts the same; torchvision's documented GFLOPS, its weights' `_ops`, are the multiply-adds,
// half of this figure).
double forward_flops(const resnet_spec& spec, std::int64_t num_classes, std::int64_t height, std::int64_t width);

}  // namespace trainbench
