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

void taps_for(resize_taps& t, const axis_plan& a, int size) {
  make_span_taps(t, a.start, a.length, a.out_total, a.out_first, size, a.lo, a.hi);
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

// Vertical pass: one output row from `taps` decoded rows, over the columns the horizontal taps read.
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

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));

// The horizontal pass reads a pixel of the vertical pass's RGB float row as four lanes: R, G, B
// and the next pixel's R, which no output uses. The row is padded so the last pixel has one.
[[gnu::always_inline]] inline v4sf load_rgb(const float* p) {
  v4sf v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// (By reference: a 32-byte vector returned by value would change the ABI of the default clone.)
[[gnu::always_inline]] inline void load_pair(const float* a, const float* b, v8sf& out) {
  out = __builtin_shufflevector(load_rgb(a), load_rgb(b), 0, 1, 2, 3, 4, 5, 6, 7);
}

// The horizontal pass with ToTensor + Normalize folded in, one output pixel at a time from
// `begin`: its weighted sum of T pixels (weights zero-padded to max_taps, the row padded with
// zeros, so the loop is branch-free), scaled and biased per channel, into the batch slot's NCHW
// planes or NHWC pixels.
template <int T, bool Last>
[[gnu::always_inline]] inline void horizontal_rgb_pixels(const float* row, const resize_taps& t, int x0, int begin,
                                                         int size, v4sf scale, v4sf bias, float* out,
                                                         std::size_t plane) {
  const int taps = T > 0 ? T : t.max_taps;
  for (int x = begin; x < size; ++x) {
    const float* w = t.weights.data() + static_cast<std::size_t>(x) * t.max_taps;
    const float* s = row + static_cast<std::size_t>(t.start[x] - x0) * 3;
    v4sf acc = {0, 0, 0, 0};
    for (int k = 0; k < taps; ++k) acc += w[k] * load_rgb(s + 3 * k);
    acc = acc * scale + bias;
    if (Last) {
      out[3 * x] = acc[0];
      out[3 * x + 1] = acc[1];
      out[3 * x + 2] = acc[2];
    } else {
      out[x] = acc[0];
      out[plane + x] = acc[1];
      out[2 * plane + x] = acc[2];
    }
  }
}

// Eight output pixels at a time for NCHW, as pairs (x + j, x + j + 4) in the halves of four
// accumulators: two rounds of unpacking then give whole R, G and B vectors, stored as they are.
// Per lane the sums are horizontal_rgb_pixels', in the same order, so both give the same floats.
template <int T>
[[gnu::always_inline]] inline void horizontal_rgb_groups(const float* row, const resize_taps& t, const float* pair_w,
                                                         int x0, int groups, const v8sf* scale, const v8sf* bias,
                                                         float* out, std::size_t plane) {
  const int taps = T > 0 ? T : t.max_taps;
  for (int g = 0; g < groups; ++g) {
    const int x = 8 * g;
    v8sf acc[4] = {};
    for (int j = 0; j < 4; ++j) {
      const float* a = row + static_cast<std::size_t>(t.start[x + j] - x0) * 3;
      const float* b = row + static_cast<std::size_t>(t.start[x + j + 4] - x0) * 3;
      const float* w = pair_w + static_cast<std::size_t>(4 * g + j) * taps * 8;
      for (int k = 0; k < taps; ++k) {
        v8sf wk, p;
        __builtin_memcpy(&wk, w + 8 * k, sizeof wk);
        load_pair(a + 3 * k, b + 3 * k, p);
        acc[j] += wk * p;
      }
    }
    const v8sf rg01 = __builtin_shufflevector(acc[0], acc[1], 0, 8, 1, 9, 4, 12, 5, 13);
    const v8sf bx01 = __builtin_shufflevector(acc[0], acc[1], 2, 10, 3, 11, 6, 14, 7, 15);
    const v8sf rg23 = __builtin_shufflevector(acc[2], acc[3], 0, 8, 1, 9, 4, 12, 5, 13);
    const v8sf bx23 = __builtin_shufflevector(acc[2], acc[3], 2, 10, 3, 11, 6, 14, 7, 15);
    const v8sf c[3] = {__builtin_shufflevector(rg01, rg23, 0, 1, 8, 9, 4, 5, 12, 13),
                       __builtin_shufflevector(rg01, rg23, 2, 3, 10, 11, 6, 7, 14, 15),
                       __builtin_shufflevector(bx01, bx23, 0, 1, 8, 9, 4, 5, 12, 13)};
    for (int ch = 0; ch < 3; ++ch) {
      const v8sf v = c[ch] * scale[ch] + bias[ch];
      __builtin_memcpy(out + ch * plane + x, &v, sizeof v);
    }
  }
}

// NCHW in groups of eight, the last size % 8 pixels one by one; NHWC one by one.
template <int T, bool Last>
[[gnu::always_inline]] inline void horizontal_rgb(const float* row, const resize_taps& t, const float* pair_w, int x0,
                                                  int size, const v8sf* scale, const v8sf* bias, float* out,
                                                  std::size_t plane) {
  const int groups = Last ? 0 : size / 8;
  if (!Last) horizontal_rgb_groups<T>(row, t, pair_w, x0, groups, scale, bias, out, plane);
  const v4sf s4 = {scale[0][0], scale[1][0], scale[2][0], 0}, b4 = {bias[0][0], bias[1][0], bias[2][0], 0};
  horizontal_rgb_pixels<T, Last>(row, t, x0, 8 * groups, size, s4, b4, out, plane);
}

template <bool Last>
[[gnu::always_inline]] inline void horizontal_rgb(const float* row, const resize_taps& t, const float* pair_w, int x0,
                                                  int size, const v8sf* scale, const v8sf* bias, float* out,
                                                  std::size_t plane) {
  switch (t.max_taps) {
    case 1:
      return horizontal_rgb<1, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
    case 2:
      return horizontal_rgb<2, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
    case 3:
      return horizontal_rgb<3, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
    case 4:
      return horizontal_rgb<4, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
    case 5:
      return horizontal_rgb<5, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
    case 6:
      return horizontal_rgb<6, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
    default:
      return horizontal_rgb<0, Last>(row, t, pair_w, x0, size, scale, bias, out, plane);
  }
}

TB_CLONES_AVX2 void horizontal_rgb(const float* row, const resize_taps& t, const float* pair_w, int x0, int size,
                                   const v8sf* scale, const v8sf* bias, bool channels_last, float* out,
                                   std::size_t plane) {
  if (channels_last) return horizontal_rgb<true>(row, t, pair_w, x0, size, scale, bias, out, plane);
  horizontal_rgb<false>(row, t, pair_w, x0, size, scale, bias, out, plane);
}

// Grayscale: one sum per output pixel, replicated into the three normalised channels.
TB_CLONES_AVX2 void horizontal_gray(const float* row, const resize_taps& t, int x0, int size, const normalizer& norm,
                                    bool channels_last, float* out, std::size_t plane) {
  for (int x = 0; x < size; ++x) {
    const float* w = t.weights.data() + static_cast<std::size_t>(x) * t.max_taps;
    const float* s = row + (t.start[x] - x0);
    float acc = 0;
    for (int k = 0; k < t.max_taps; ++k) acc += w[k] * s[k];
    for (int c = 0; c < 3; ++c) {
      const float v = acc * norm.scale[c] + norm.bias[c];
      if (channels_last)
        out[3 * x + c] = v;
      else
        out[c * plane + x] = v;
    }
  }
}

// The column weights as horizontal_rgb_groups reads them: for group g, pair j (pixels 8g + j and
// 8g + j + 4) and tap k, eight floats: the first pixel's weight four times, then the second's.
void pair_weights(const resize_taps& t, int size, std::vector<float>& w) {
  const int groups = size / 8, taps = t.max_taps;
  w.resize(static_cast<std::size_t>(groups) * 4 * taps * 8);
  for (int g = 0; g < groups; ++g)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < taps; ++k) {
        float* d = w.data() + (static_cast<std::size_t>(4 * g + j) * taps + k) * 8;
        std::fill(d, d + 4, t.weights[static_cast<std::size_t>(8 * g + j) * taps + k]);
        std::fill(d + 4, d + 8, t.weights[static_cast<std::size_t>(8 * g + j + 4) * taps + k]);
      }
}

}  // namespace

resize_plan scaled_plan(const resize_plan& p, int scale, int height, int width) {
  resize_plan s = p;
  s.x = scaled_axis(p.x, scale, width);
  s.y = scaled_axis(p.y, scale, height);
  return s;
}

jpeg_region crop_resampler::prepare(const resize_plan& p, int scale, int height, int width, int size) {
  const resize_plan s = scaled_plan(p, scale, height, width);
  taps_for(cols_, s.x, size);
  taps_for(rows_, s.y, size);
  if (p.flip) reverse_taps(cols_);
  pair_weights(cols_, size, pair_w_);
  size_ = size;
  const auto [x0, x1] = tap_range(cols_);
  const auto [y0, y1] = tap_range(rows_);
  x0_ = x0;
  x1_ = x1;
  jpeg_region r;
  r.scale = scale;
  r.x0 = x0;
  r.x1 = x1;
  r.y0 = y0;
  r.y1 = y1;
  return r;
}

// Vertical first over the columns the horizontal taps read (only `size` rows, never the decoded
// region's margins), then horizontal with the normalisation, straight into the slot.
void crop_resampler::resample(const decoded_pixels& px, const normalizer& norm, bool channels_last, float* dst) {
  TB_ASSERT(px.channels == 1 || px.channels == 3, "decoded pixels are grayscale or RGB");
  TB_ASSERT(x0_ >= px.x0 && x1_ <= px.x0 + px.width, "decoded columns cover the taps");
  const int cols = x1_ - x0_, n = cols * px.channels;
  const std::size_t skip = static_cast<std::size_t>(x0_ - px.x0) * px.channels;
  // Padded so the fixed-length horizontal taps may run past the row's end (on zero weights),
  // and by one float more for the fourth lane of the last RGB pixel.
  row_.resize(static_cast<std::size_t>(cols + cols_.max_taps) * px.channels + 1);
  std::fill(row_.begin() + n, row_.end(), 0.f);
  row_ptrs_.resize(static_cast<std::size_t>(rows_.max_taps));
  const std::size_t plane = static_cast<std::size_t>(size_) * size_;
  v8sf scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = v8sf{} + norm.scale[c];
    bias[c] = v8sf{} + norm.bias[c];
  }
  for (int y = 0; y < size_; ++y) {
    const int taps = rows_.count[y];
    for (int k = 0; k < taps; ++k)
      row_ptrs_[k] = px.data + static_cast<std::size_t>(rows_.start[y] - px.y0 + k) * px.stride + skip;
    blend_u8(row_ptrs_.data(), rows_.weights.data() + static_cast<std::size_t>(y) * rows_.max_taps, taps, n,
             row_.data());
    float* out = dst + static_cast<std::size_t>(y) * size_ * (channels_last ? 3 : 1);
    if (px.channels == 3)
      horizontal_rgb(row_.data(), cols_, pair_w_.data(), x0_, size_, scale, bias, channels_last, out, plane);
    else
      horizontal_gray(row_.data(), cols_, x0_, size_, norm, channels_last, out, plane);
  }
}

normalizer::normalizer(const std::vector<double>& mean, const std::vector<double>& std) {
  for (int c = 0; c < 3; ++c) {
    // (v / 255 - mean) / std folded into one multiply-add.
    scale[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    bias[c] = static_cast<float>(-mean[c] / std[c]);
  }
}

}  // namespace trainbench
