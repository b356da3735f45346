#pragma once
// Host-side Resize + ToTensor + Normalize, fused into one pass per image (no torch here).
#include <cstdint>
#include <vector>

namespace trainbench {

struct resize_taps {
  std::vector<int> start;      // first source index per output index
  std::vector<int> count;      // taps per output index
  std::vector<float> weights;  // max_taps per output index, normalised, zero after count
  int max_taps = 0;            // the largest count
};

// Bilinear with half-pixel centres; when shrinking, the triangle filter widens with the scale
// (antialias), as torchvision's Resize does for PIL images and for tensors with antialias=True.
resize_taps make_taps(int in_size, int out_size);

// The general form: outputs [out_first, out_first + out_count) of a resize of the source span
// [span_start, span_start + span_length) (source pixels, fractional after DCT scaling) to
// out_total pixels, reading source indices in [lo, hi) only (a crop's edge, as if cut out first).
// make_taps(in, out) is make_span_taps(0, in, out, 0, out, 0, in).
resize_taps make_span_taps(double span_start, double span_length, int out_total, int out_first, int out_count, int lo,
                           int hi);
// The same into `t`, reusing its buffers: a loader worker plans every image without allocating.
void make_span_taps(resize_taps& t, double span_start, double span_length, int out_total, int out_first, int out_count,
                    int lo, int hi);

class image_transform {
 public:
  image_transform(int in_height, int in_width, int in_channels, int out_size, const std::vector<double>& mean,
                  const std::vector<double>& std, bool channels_last);
  // src: in_height x in_width x in_channels uint8; dst: 3 x out x out floats (NCHW) or out x out x 3 (NHWC).
  // scratch is caller-owned so the transform stays const and shareable between threads.
  void apply(const std::uint8_t* src, float* dst, std::vector<float>& scratch) const;
  std::int64_t output_floats() const { return 3LL * out_ * out_; }

 private:
  int in_h_, in_w_, in_c_, out_;
  bool channels_last_;
  resize_taps rows_, cols_;
  float scale_[3], bias_[3];
};

}  // namespace trainbench
