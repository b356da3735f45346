#pragma once
// torchvision's ImageNet transforms on one decoded image, with its semantics:
//   train: RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + RandomHorizontalFlip(0.5)
//   eval:  Resize(round(size * 256 / 224)) + CenterCrop(size)
// then ToTensor + Normalize. Resampling is the antialiased bilinear filter of transform.hpp,
// so a crop is resized exactly as torchvision's resized_crop(..., antialias=True) does.
#include <cstdint>
#include <vector>

#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/transform.hpp"

namespace trainbench {

struct crop_box {
  int top = 0, left = 0, height = 0, width = 0;
};

// Counter-based: each sample of each epoch has its own stream, so a crop depends on the seed, the
// epoch and the sample, never on which worker drew it or when.
class sample_rng {
 public:
  sample_rng(std::uint64_t seed, std::int64_t epoch, std::int64_t index);
  std::uint64_t next();
  double uniform(double lo, double hi);                    // [lo, hi), as Tensor.uniform_
  std::int64_t integer(std::int64_t lo, std::int64_t hi);  // [lo, hi), as torch.randint

 private:
  std::uint64_t state_;
};

struct crop_scale {
  double area_lo = 0.08, area_hi = 1.0;
  double ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0;
};

// RandomResizedCrop.get_params: ten tries of a random area and log-uniform aspect ratio, then the
// centre crop clamped to the ratio range.
crop_box random_resized_crop(int height, int width, sample_rng& rng, const crop_scale& s = {});

// One axis of "source span -> out_total pixels, keep [out_first, out_first + size)", reading only
// source pixels [lo, hi), in full-resolution pixels (in a DCT-scaled image's after scaled_plan).
struct axis_plan {
  double start = 0, length = 0;
  int out_total = 0, out_first = 0, lo = 0, hi = 0;
};
struct resize_plan {
  axis_plan x, y;
  bool flip = false;
};
resize_plan train_plan(const crop_box& box, int size, bool flip);
resize_plan eval_plan(int height, int width, int size);
// The shorter side eval resizes to: round(size * 256 / 224), torchvision's reference ratio.
int eval_resize_size(int size);

// The largest DCT scale (8, 4, 2, else 1) at which the scaled span still has at least the
// output's resolution on both axes, so the resize after it is still a (filtered) reduction.
int dct_scale(const resize_plan& p, int max_scale = 8);
// The plan in the pixels of the image (height x width at full resolution) decoded at 1/scale:
// the source span scaled, the rows and columns it reads widened to whole scaled pixels.
resize_plan scaled_plan(const resize_plan& p, int scale, int height, int width);

// ToTensor + Normalize, (v / 255 - mean) / std, as one multiply-add per channel.
struct normalizer {
  normalizer(const std::vector<double>& mean, const std::vector<double>& std);
  float scale[3], bias[3];
};

// Per worker: the taps and the decode region for one image, then the resampling. Buffers are
// kept between images (no allocation once they have grown to the largest image).
class crop_resampler {
 public:
  // Plans the image (height x width at full resolution) decoded at 1/scale into size x size.
  jpeg_region prepare(const resize_plan& p, int scale, int height, int width, int size);
  // Resamples the decoded region and normalises it in the same pass, straight into the batch
  // slot: 3 x size x size floats (NCHW) or size x size x 3 (NHWC). Grayscale is replicated into
  // the three channels.
  void resample(const decoded_pixels& px, const normalizer& norm, bool channels_last, float* dst);

 private:
  int size_ = 0;
  int x0_ = 0, x1_ = 0;  // the source columns the horizontal taps read
  resize_taps cols_, rows_;
  std::vector<float> pair_w_;  // cols_ laid out for eight pixels at a time
  std::vector<float> row_;
  std::vector<const std::uint8_t*> row_ptrs_;
};

}  // namespace trainbench
