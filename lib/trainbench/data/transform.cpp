#include "trainbench/data/transform.hpp"

#include <algorithm>
#include <cmath>

#include "trainbench/util/target_clones.hpp"

namespace trainbench {

resize_taps make_taps(int in_size, int out_size) {
  return make_span_taps(0.0, in_size, out_size, 0, out_size, 0, in_size);
}

resize_taps make_span_taps(double span_start, double span_length, int out_total, int out_first, int out_count, int lo,
                           int hi) {
  resize_taps t;
  make_span_taps(t, span_start, span_length, out_total, out_first, out_count, lo, hi);
  return t;
}

void make_span_taps(resize_taps& t, double span_start, double span_length, int out_total, int out_first, int out_count,
                    int lo, int hi) {
  const double scale = span_length / out_total;
  const double support = std::max(1.0, scale);                     // filter half-width in source pixels
  const int bound = static_cast<int>(std::ceil(support)) * 2 + 1;  // taps any output can have
  t.start.resize(out_count);
  t.count.resize(out_count);
  t.weights.assign(static_cast<std::size_t>(out_count) * bound, 0.f);
  thread_local std::vector<double> w;  // one output's raw weights; grows once per thread
  for (int i = 0; i < out_count; ++i) {
    const double center = span_start + (out_first + i + 0.5) * scale;
    const int first_tap = std::max(lo, static_cast<int>(std::floor(center - support + 0.5)));
    const int end_tap = std::min(hi, static_cast<int>(std::floor(center + support + 0.5)));
    double total = 0;
    w.clear();
    for (int j = first_tap; j < end_tap; ++j) {
      const double x = (j + 0.5 - center) / support;
      w.push_back(std::max(0.0, 1.0 - std::abs(x)));
      total += w.back();
    }
    // Drop zero-weight edge taps so the common upsampling case has exactly two.
    std::size_t first = 0, last = w.size();
    while (first < last && w[first] == 0) ++first;
    while (last > first && w[last - 1] == 0) --last;
    t.start[i] = first_tap + static_cast<int>(first);
    t.count[i] = static_cast<int>(last - first);
    float* row = t.weights.data() + static_cast<std::size_t>(i) * bound;
    for (std::size_t k = first; k < last; ++k) row[k - first] = static_cast<float>(total > 0 ? w[k] / total : 0);
  }
  // The bound counts the filter's zero ends: shrinking by 1.34 gives at most 3 taps, not 5. The
  // loops run max_taps taps for every output, so the stride is the largest real count: the rows
  // move down in place (row i's new start is never past its old one).
  t.max_taps = std::max(1, *std::max_element(t.count.begin(), t.count.end()));
  for (int i = 1; i < out_count && t.max_taps < bound; ++i)
    std::copy_n(t.weights.begin() + static_cast<std::ptrdiff_t>(i) * bound, t.max_taps,
                t.weights.begin() + static_cast<std::ptrdiff_t>(i) * t.max_taps);
  t.weights.resize(static_cast<std::size_t>(out_count) * t.max_taps);
}

image_transform::image_transform(int in_height, int in_width, int in_channels, int out_size,
                                 const std::vector<double>& mean, const std::vector<double>& std, bool channels_last)
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

namespace {

// The hot loops: contiguous, branch-free, compiled for AVX2 too (chosen at load time).
// blend_rows sums `taps` consecutive scratch rows (`stride` floats apart), as many as the
// filter has: shrinking by s takes about 2s of them.
TB_CLONES_AVX2 void blend_rows(const float* first, std::size_t stride, const float* weights, int taps, int n,
                               float* __restrict out) {
  if (taps == 2) {
    const float* __restrict a = first;
    const float* __restrict b = first + stride;
    const float wa = weights[0], wb = weights[1];
    for (int i = 0; i < n; ++i) out[i] = wa * a[i] + wb * b[i];
    return;
  }
  for (int i = 0; i < n; ++i) out[i] = 0;
  for (int k = 0; k < taps; ++k) {
    const float* __restrict r = first + static_cast<std::size_t>(k) * stride;
    const float w = weights[k];
    for (int i = 0; i < n; ++i) out[i] += w * r[i];
  }
}

TB_CLONES_AVX2 void affine(const float* __restrict in, float scale, float bias, int n, float* __restrict out) {
  for (int i = 0; i < n; ++i) out[i] = in[i] * scale + bias;
}

}  // namespace

// Horizontal pass into scratch (per channel planes: in_c x in_h x out), then per output row a
// vertical blend of two (or a few) scratch rows, then scale and bias into the output layout.
void image_transform::apply(const std::uint8_t* src, float* dst, std::vector<float>& scratch) const {
  const std::size_t plane_tmp = static_cast<std::size_t>(in_h_) * out_;
  scratch.resize(static_cast<std::size_t>(in_c_) * plane_tmp + 3 * static_cast<std::size_t>(out_));
  float* tmp = scratch.data();
  float* row = tmp + static_cast<std::size_t>(in_c_) * plane_tmp;  // 3 * out floats
  for (int y = 0; y < in_h_; ++y) {
    const std::uint8_t* line = src + static_cast<std::size_t>(y) * in_w_ * in_c_;
    for (int x = 0; x < out_; ++x) {
      const float* w = cols_.weights.data() + static_cast<std::size_t>(x) * cols_.max_taps;
      const std::uint8_t* s = line + static_cast<std::size_t>(cols_.start[x]) * in_c_;
      for (int c = 0; c < in_c_; ++c) {
        float acc = 0;
        for (int k = 0; k < cols_.count[x]; ++k) acc += w[k] * s[k * in_c_ + c];
        tmp[c * plane_tmp + static_cast<std::size_t>(y) * out_ + x] = acc;
      }
    }
  }
  const std::size_t plane = static_cast<std::size_t>(out_) * out_;
  for (int y = 0; y < out_; ++y) {
    const float* w = rows_.weights.data() + static_cast<std::size_t>(y) * rows_.max_taps;
    for (int c = 0; c < in_c_; ++c) {
      const float* first = tmp + c * plane_tmp + static_cast<std::size_t>(rows_.start[y]) * out_;
      float* v = row + static_cast<std::size_t>(c) * out_;
      blend_rows(first, out_, w, rows_.count[y], out_, v);
    }
    if (!channels_last_) {
      for (int c = 0; c < 3; ++c) {
        const float* v = row + static_cast<std::size_t>(in_c_ == 1 ? 0 : c) * out_;  // grayscale replicated
        affine(v, scale_[c], bias_[c], out_, dst + c * plane + static_cast<std::size_t>(y) * out_);
      }
    } else {
      float* out_row = dst + static_cast<std::size_t>(y) * out_ * 3;
      for (int c = 0; c < 3; ++c) {
        const float* v = row + static_cast<std::size_t>(in_c_ == 1 ? 0 : c) * out_;
        for (int x = 0; x < out_; ++x) out_row[x * 3 + c] = v[x] * scale_[c] + bias_[c];
      }
    }
  }
}

}  // namespace trainbench
