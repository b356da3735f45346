#include "trainbench/data/transform.hpp"

#include <algorithm>
#include <cmath>

namespace trainbench {

resize_taps make_taps(int in_size, int out_size) {
  resize_taps t;
  const double scale = static_cast<double>(in_size) / out_size;
  const double support = std::max(1.0, scale);  // filter half-width in source pixels
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.start.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<std::size_t>(out_size) * t.max_taps, 0.f);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(0, static_cast<int>(center - support + 0.5));
    const int hi = std::min(in_size, static_cast<int>(center + support + 0.5));
    double total = 0;
    std::vector<double> w;
    for (int j = lo; j < hi; ++j) {
      const double x = (j + 0.5 - center) / support;
      w.push_back(std::max(0.0, 1.0 - std::abs(x)));
      total += w.back();
    }
    t.start[i] = lo;
    t.count[i] = static_cast<int>(w.size());
    for (std::size_t k = 0; k < w.size(); ++k)
      t.weights[static_cast<std::size_t>(i) * t.max_taps + k] = static_cast<float>(total > 0 ? w[k] / total : 0);
  }
  return t;
}

image_transform::image_transform(int in_height, int in_width, int in_channels, int out_size,
                                 const std::vector<double>& mean, const std::vector<double>& std,
                                 bool channels_last)
    : in_h_(in_height),
      in_w_(in_width),
      in_c_(in_channels),
      out_(out_size),
      channels_last_(channels_last),
      rows_(make_taps(in_height, out_size)),
      cols_(make_taps(in_width, out_size)) {
  for (int c = 0; c < 3; ++c) {
    // (v / 255 - mean) / std folded into one multiply-add.
    scale_[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    bias_[c] = static_cast<float>(-mean[c] / std[c]);
  }
}

void image_transform::apply(const std::uint8_t* src, float* dst, std::vector<float>& scratch) const {
  // Horizontal pass: in_h x out x in_c floats.
  const std::size_t tmp_row = static_cast<std::size_t>(out_) * in_c_;
  scratch.resize(static_cast<std::size_t>(in_h_) * tmp_row);
  for (int y = 0; y < in_h_; ++y) {
    const std::uint8_t* row = src + static_cast<std::size_t>(y) * in_w_ * in_c_;
    float* out = scratch.data() + y * tmp_row;
    for (int x = 0; x < out_; ++x) {
      const float* w = cols_.weights.data() + static_cast<std::size_t>(x) * cols_.max_taps;
      const std::uint8_t* s = row + static_cast<std::size_t>(cols_.start[x]) * in_c_;
      for (int c = 0; c < in_c_; ++c) {
        float acc = 0;
        for (int k = 0; k < cols_.count[x]; ++k) acc += w[k] * s[k * in_c_ + c];
        out[x * in_c_ + c] = acc;
      }
    }
  }
  // Vertical pass, fused with normalisation and the output layout.
  const std::size_t plane = static_cast<std::size_t>(out_) * out_;
  for (int y = 0; y < out_; ++y) {
    const float* w = rows_.weights.data() + static_cast<std::size_t>(y) * rows_.max_taps;
    const float* s = scratch.data() + static_cast<std::size_t>(rows_.start[y]) * tmp_row;
    const int taps = rows_.count[y];
    for (int x = 0; x < out_; ++x) {
      float v[3];
      for (int c = 0; c < in_c_; ++c) {
        float acc = 0;
        for (int k = 0; k < taps; ++k) acc += w[k] * s[k * tmp_row + x * in_c_ + c];
        v[c] = acc;
      }
      for (int c = in_c_; c < 3; ++c) v[c] = v[0];  // grayscale replicated to 3 channels
      const std::size_t pixel = static_cast<std::size_t>(y) * out_ + x;
      for (int c = 0; c < 3; ++c) {
        const float value = v[c] * scale_[c] + bias_[c];
        if (channels_last_) dst[pixel * 3 + c] = value;
        else dst[c * plane + pixel] = value;
      }
    }
  }
}

}  // namespace trainbench
