#include "trainbench/stages/preprocess.hpp"

#include <ATen/ATen.h>

namespace trainbench {

device_preprocess::device_preprocess(int image_size, const std::vector<double>& mean, const std::vector<double>& std,
                                     bool channels_last, c10::Device device)
    : size_(image_size), channels_last_(channels_last) {
  std::vector<float> scale, bias;
  for (std::size_t c = 0; c < 3; ++c) {
    scale.push_back(static_cast<float>(1.0 / (255.0 * std[c])));
    bias.push_back(static_cast<float>(-mean[c] / std[c]));
  }
  auto opts = at::TensorOptions().dtype(at::kFloat);
  scale_ = at::tensor(scale, opts).view({1, 3, 1, 1}).to(device);
  bias_ = at::tensor(bias, opts).view({1, 3, 1, 1}).to(device);
}

at::Tensor device_preprocess::operator()(const at::Tensor& raw) const {
  at::Tensor x = raw.permute({0, 3, 1, 2}).to(at::kFloat);
  if (x.size(1) == 1) x = x.expand({-1, 3, -1, -1});
  const bool shrink = x.size(2) > size_ || x.size(3) > size_;
  // Antialiasing only matters when shrinking; upsampling is plain bilinear (half-pixel centres).
  x = shrink ? at::_upsample_bilinear2d_aa(x, {size_, size_}, false)
             : at::upsample_bilinear2d(x, {size_, size_}, false);
  x = at::addcmul(bias_, x, scale_);
  return channels_last_ ? x.contiguous(at::MemoryFormat::ChannelsLast) : x.contiguous();
}

}  // namespace trainbench
