#include "trainbench/data/crop.hpp"

#include <algorithm>
#include <cmath>

#include "trainbench/util/error.hpp"
#include "trainbench/util/target_clones.hpp"

namespace trainbench {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Python's round(): halves to even (std::nearbyint in the default rounding mode).
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

sample_rng::sample_rng(std::uint64_t seed, std::int64_t epoch, std::int64_t index)
    : state_(splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(epoch)) ^
                        static_cast<std::uint64_t>(index))) {}

std::uint64_t sample_rng::next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double sample_rng::uniform(double lo, double hi) {
  const double u = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
  return lo + (hi - lo) * u;
}

std::int64_t sample_rng::integer(std::int64_t lo, std::int64_t hi) {
  const auto n = static_cast<unsigned __int128>(hi - lo);
  return lo + static_cast<std::int64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
}

crop_box random_resized_crop(int height, int width, sample_rng& rng, const crop_scale& s) {
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(s.ratio_lo), log_hi = std::log(s.ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(s.area_lo, s.area_hi);
    const double ratio = std::exp(rng.uniform(log_lo, log_hi));
    const int w = round_half_even(std::sqrt(target * ratio));
    const int h = round_half_even(std::sqrt(target / ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      crop_box b;
      b.height = h;
      b.width = w;
      b.top = static_cast<int>(rng.integer(0, height - h + 1));
      b.left = static_cast<int>(rng.integer(0, width - w + 1));
      return b;
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  crop_box b;
  if (in_ratio < s.ratio_lo) {
    b.width = width;
    b.height = round_half_even(b.width / s.ratio_lo);
  } else if (in_ratio > s.ratio_hi) {
    b.height = height;
    b.width = round_half_even(b.height * s.ratio_hi);
  } else {
    b.width = width;
    b.height = height;
  }
  b.top = (height - b.height) / 2;
  b.left = (width - b.width) / 2;
  return b;
}

resize_plan train_plan(const crop_box& box, int size, bool flip) {
  resize_plan p;
  p.x = {static_cast<double>(box.left), static_cast<double>(box.width), size, 0, box.left, box.left + box.width};
  p.y = {static_cast<double>(box.top), static_cast<double>(box.height), size, 0, box.top, box.top + box.height};
  p.flip = flip;
  return p;
}

int eval_resize_size(int size) { return round_half_even(size * 256.0 / 224.0); }

resize_plan eval_plan(int height, int width, int size) {
  // Resize(int): the shorter side becomes `r`, the longer int(r * long / short) (truncated).
  const int r = eval_resize_size(size);
  int new_h = r, new_w = r;
  if (width <= height)
    new_h = static_cast<int>(static_cast<double>(r) * height / width);
  else
    new_w = static_cast<int>(static_cast<double>(r) * width / height);
  // CenterCrop: int(round((resized - size) / 2)).
  const int top = round_half_even((new_h - size) / 2.0), left = round_half_even((new_w - size) / 2.0);
  resize_plan p;
  p.x = {0.0, static_cast<double>(width), new_w, left, 0, width};
  p.y = {0.0, static_cast<double>(height), new_h, top, 0, height};
  return p;
}

int dct_scale(const resize_plan& p, int max_scale) {
  for (int k = max_scale; k > 1; k /= 2)
    if (p.x.length / k >= p.x.out_total && p.y.length / k >= p.y.out_total) return k;
  return 1;
}

namespace {

axis_plan scaled_axis(const axis_plan& a, int k, int full) {
  axis_plan s = a;
  s.start = a.start / k;
  s.length = a.length / k;
  s.lo = a.lo / k;
  s.hi = std::min(jpeg_decoder::scaled(full, k), (a.hi + k - 1) / k);
  return s;
}

resize_taps taps_for(const axis_plan& a, int size) {
  return make_span_taps(a.start, a.length, a.out_total, a.out_first, size, a.lo, a.hi);
}

// The source indices the taps read: [first, end).
std::pair<int, int> tap_range(const resize_taps& t) {
  int first = t.start.front(), end = 0;
  for (std::size_t i = 0; i < t.start.size(); ++i) {
    first = std::min(first, t.start[i]);
    end = std::max(end, t.start[i] + t.count[i]);
  }
  return {first, end};
}

void reverse_taps(resize_taps& t) {
  const std::size_t n = t.start.size(), m = static_cast<std::size_t>(t.max_taps);
  std::reverse(t.start.begin(), t.start.end());
  std::reverse(t.count.begin(), t.count.end());
  for (std::size_t i = 0; i < n / 2; ++i)
    std::swap_ranges(t.weights.begin() + i * m, t.weights.begin() + (i + 1) * m, t.weights.begin() + (n - 1 - i) * m);
}

// Vertical pass: one output row from `taps` decoded rows, over the whole (cropped) row width.
// All taps in one pass (in registers) for the common counts, accumulated in passes beyond them.
template <int T>
void blend_u8_fixed(const std::uint8_t* const* rows, const float* w, int n, float* __restrict out) {
  const std::uint8_t* __restrict r[T];
  for (int k = 0; k < T; ++k) r[k] = rows[k];
  for (int i = 0; i < n; ++i) {
    float acc = w[0] * r[0][i];
    for (int k = 1; k < T; ++k) acc += w[k] * r[k][i];
    out[i] = acc;
  }
}

TB_CLONES_AVX2 void blend_u8(const std::uint8_t* const* rows, const float* weights, int taps, int n,
                             float* __restrict out) {
  switch (taps) {
    case 1:
      return blend_u8_fixed<1>(rows, weights, n, out);
    case 2:
      return blend_u8_fixed<2>(rows, weights, n, out);
    case 3:
      return blend_u8_fixed<3>(rows, weights, n, out);
    case 4:
      return blend_u8_fixed<4>(rows, weights, n, out);
    case 5:
      return blend_u8_fixed<5>(rows, weights, n, out);
    default:
      break;
  }
  blend_u8_fixed<4>(rows, weights, n, out);
  for (int k = 4; k < taps; ++k) {
    const std::uint8_t* __restrict r = rows[k];
    const float w = weights[k];
    for (int i = 0; i < n; ++i) out[i] += w * r[i];
  }
}

TB_CLONES_AVX2 void affine(const float* __restrict in, float scale, float bias, int n, float* __restrict out) {
  for (int i = 0; i < n; ++i) out[i] = in[i] * scale + bias;
}

typedef float v4sf __attribute__((vector_size(16)));

// Horizontal pass over an RGBX float row: one 4-lane multiply-add per tap and output pixel. A
// fixed tap count T (weights zero-padded to max_taps, the row padded with zeros) keeps the inner
// loop branch-free and unrolled.
template <int T>
void horizontal_rgbx_fixed(const float* row, const resize_taps& t, int x0, int size, float* out, std::size_t plane) {
  for (int x = 0; x < size; ++x) {
    const float* w = t.weights.data() + static_cast<std::size_t>(x) * t.max_taps;
    const float* s = row + static_cast<std::size_t>(t.start[x] - x0) * 4;
    v4sf acc = {0, 0, 0, 0};
    for (int k = 0; k < (T > 0 ? T : t.max_taps); ++k) {
      v4sf p;
      __builtin_memcpy(&p, s + 4 * k, sizeof p);
      acc += w[k] * p;
    }
    out[x] = acc[0];
    out[plane + x] = acc[1];
    out[2 * plane + x] = acc[2];
  }
}

TB_CLONES_AVX2 void horizontal_rgbx(const float* row, const resize_taps& t, int x0, int size, float* out,
                                    std::size_t plane) {
  switch (t.max_taps) {
    case 3:
      return horizontal_rgbx_fixed<3>(row, t, x0, size, out, plane);
    case 5:
      return horizontal_rgbx_fixed<5>(row, t, x0, size, out, plane);
    case 7:
      return horizontal_rgbx_fixed<7>(row, t, x0, size, out, plane);
    default:
      return horizontal_rgbx_fixed<0>(row, t, x0, size, out, plane);
  }
}

TB_CLONES_AVX2 void horizontal_gray(const float* row, const resize_taps& t, int x0, int size, float* out) {
  for (int x = 0; x < size; ++x) {
    const float* w = t.weights.data() + static_cast<std::size_t>(x) * t.max_taps;
    const float* s = row + (t.start[x] - x0);
    float acc = 0;
    for (int k = 0; k < t.max_taps; ++k) acc += w[k] * s[k];
    out[x] = acc;
  }
}

}  // namespace

jpeg_region crop_resampler::prepare(const resize_plan& p, int scale, int height, int width, int size) {
  const axis_plan x = scaled_axis(p.x, scale, width), y = scaled_axis(p.y, scale, height);
  cols_ = taps_for(x, size);
  rows_ = taps_for(y, size);
  if (p.flip) reverse_taps(cols_);
  size_ = size;
  const auto [x0, x1] = tap_range(cols_);
  const auto [y0, y1] = tap_range(rows_);
  jpeg_region r;
  r.scale = scale;
  r.x0 = x0;
  r.x1 = x1;
  r.y0 = y0;
  r.y1 = y1;
  return r;
}

// Vertical first (vectorised over the row, only `size` rows), then horizontal into the planes.
void crop_resampler::resample(const decoded_pixels& px, float* planes) {
  TB_ASSERT(px.channels == 1 || px.channels == 4, "decoded pixels are grayscale or RGBX");
  const int n = px.width * px.channels;
  // Padded so the fixed-length horizontal taps may run past the row's end (on zero weights).
  row_.resize(static_cast<std::size_t>(px.width + cols_.max_taps) * px.channels);
  std::fill(row_.begin() + n, row_.end(), 0.f);
  row_ptrs_.resize(static_cast<std::size_t>(rows_.max_taps));
  const std::size_t plane = static_cast<std::size_t>(size_) * size_;
  for (int y = 0; y < size_; ++y) {
    const int taps = rows_.count[y];
    for (int k = 0; k < taps; ++k)
      row_ptrs_[k] = px.data + static_cast<std::size_t>(rows_.start[y] - px.y0 + k) * px.stride;
    blend_u8(row_ptrs_.data(), rows_.weights.data() + static_cast<std::size_t>(y) * rows_.max_taps, taps, n,
             row_.data());
    float* out = planes + static_cast<std::size_t>(y) * size_;
    if (px.channels == 4)
      horizontal_rgbx(row_.data(), cols_, px.x0, size_, out, plane);
    else
      horizontal_gray(row_.data(), cols_, px.x0, size_, out);
  }
}

normalizer::normalizer(const std::vector<double>& mean, const std::vector<double>& std) {
  for (int c = 0; c < 3; ++c) {
    // (v / 255 - mean) / std folded into one multiply-add.
    scale[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    bias[c] = static_cast<float>(-mean[c] / std[c]);
  }
}

void normalizer::apply(const float* planes, int channels, int size, bool channels_last, float* dst) const {
  const std::size_t plane = static_cast<std::size_t>(size) * size;
  if (!channels_last) {
    for (int c = 0; c < 3; ++c)
      affine(planes + (channels == 1 ? 0 : c) * plane, scale[c], bias[c], static_cast<int>(plane), dst + c * plane);
    return;
  }
  for (std::size_t i = 0; i < plane; ++i)
    for (int c = 0; c < 3; ++c) dst[i * 3 + c] = planes[(channels == 1 ? 0 : c) * plane + i] * scale[c] + bias[c];
}

}  // namespace trainbench
