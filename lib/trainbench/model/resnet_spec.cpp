#include "trainbench/model/resnet_spec.hpp"

#include "trainbench/util/text.hpp"

namespace trainbench {

const std::vector<resnet_spec>& resnet_specs() {
  // torchvision.models.resnet: the builders' (block, layers, groups, width_per_group).
  static const std::vector<resnet_spec> table = {
      {"resnet18", resnet_block::basic, {2, 2, 2, 2}},
      {"resnet34", resnet_block::basic, {3, 4, 6, 3}},
      {"resnet50", resnet_block::bottleneck, {3, 4, 6, 3}},
      {"resnet101", resnet_block::bottleneck, {3, 4, 23, 3}},
      {"resnet152", resnet_block::bottleneck, {3, 8, 36, 3}},
      {"resnext50_32x4d", resnet_block::bottleneck, {3, 4, 6, 3}, 32, 4},
      {"resnext101_32x8d", resnet_block::bottleneck, {3, 4, 23, 3}, 32, 8},
      {"resnext101_64x4d", resnet_block::bottleneck, {3, 4, 23, 3}, 64, 4},
      {"wide_resnet50_2", resnet_block::bottleneck, {3, 4, 6, 3}, 1, 128},
      {"wide_resnet101_2", resnet_block::bottleneck, {3, 4, 23, 3}, 1, 128},
  };
  return table;
}

const resnet_spec* find_resnet_spec(const std::string& arch) {
  for (const auto& s : resnet_specs())
    if (arch == s.name) return &s;
  return nullptr;
}

std::vector<std::string> model_arch_names() {
  std::vector<std::string> out;
  for (const auto& s : resnet_specs()) out.emplace_back(s.name);
  return out;
}

std::string unknown_arch_message(const std::string& arch) {
  const auto names = model_arch_names();
  const std::string hint = closest_match(arch, names);
  return "unknown value '" + arch + "'" + (hint.empty() ? std::string() : "; did you mean '" + hint + "'?") +
         "; allowed: " + join(names, ", ");
}

namespace {

// Output side of a convolution or pooling window.
std::int64_t out_side(std::int64_t in, int kernel, int stride, int padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}

struct shape_walk {
  std::int64_t h, w;
  double macs = 0;

  // A convolution at the current spatial size; moves to its output size.
  void conv(std::int64_t in, std::int64_t out, int kernel, int stride, int padding, int groups = 1) {
    h = out_side(h, kernel, stride, padding);
    w = out_side(w, kernel, stride, padding);
    macs += static_cast<double>(h * w) * static_cast<double>(out) * static_cast<double>(in / groups) * kernel * kernel;
  }
};

}  // namespace

double forward_flops(const resnet_spec& spec, std::int64_t num_classes, std::int64_t height, std::int64_t width) {
  shape_walk s{height, width};
  s.conv(3, 64, 7, 2, 3);
  s.h = out_side(s.h, 3, 2, 1);  // max pool
  s.w = out_side(s.w, 3, 2, 1);
  const int expansion = spec.block == resnet_block::basic ? 1 : 4;
  std::int64_t in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const std::int64_t planes = 64 << layer;
    for (int b = 0; b < spec.layers[layer]; ++b) {
      const int stride = (layer > 0 && b == 0) ? 2 : 1;
      const std::int64_t out = planes * expansion;
      const std::int64_t in_h = s.h, in_w = s.w;
      if (spec.block == resnet_block::basic) {
        s.conv(in, planes, 3, stride, 1);
        s.conv(planes, planes, 3, 1, 1);
      } else {
        const std::int64_t mid = planes * spec.width_per_group / 64 * spec.groups;
        s.conv(in, mid, 1, 1, 0);
        s.conv(mid, mid, 3, stride, 1, spec.groups);  // the stride sits here ("v1.5")
        s.conv(mid, out, 1, 1, 0);
      }
      if (stride != 1 || in != out) {
        shape_walk down{in_h, in_w};
        down.conv(in, out, 1, stride, 0);
        s.macs += down.macs;
      }
      in = out;
    }
  }
  s.macs += static_cast<double>(in) * static_cast<double>(num_classes);  // fc
  return 2 * s.macs;
}

}  // namespace trainbench
