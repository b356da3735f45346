#pragma once
// The fused crop's per-pixel arithmetic, shared by the CUDA kernel (cuda/fused_crop.cu) and its
// host emulation (data/fused_crop.cpp), so CPU CI tests the exact floating-point operations the
// kernel runs. Plain types only: this header compiles under g++ and nvcc alike.
//
// The arithmetic mirrors the host path (crop_resampler in data/crop.cpp) operation by operation:
// the taps of make_span_taps in double, then per output pixel a vertical sum over uint8 rows and a
// horizontal sum of those, in float, each a sequence of separately rounded multiplies and adds,
// then one multiply and one add to normalise. In device code every multiply and add goes through
// the round-to-nearest intrinsics, which nvcc never contracts into a fused multiply-add; the host
// code is compiled in ISO C++ mode, where g++ does not contract either.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TB_HD __host__ __device__
#else
#define TB_HD
#endif

namespace trainbench {

enum class crop_layout : int { nchw = 0, nhwc = 1 };
enum class crop_dtype : int { float32 = 0, float16 = 1, bfloat16 = 2 };

// One axis of a crop, as data/crop.hpp's axis_plan: the source span [start, start + length) is
// resized to out_total pixels, of which [out_first, out_first + S) are kept, reading source pixels
// [lo, hi) only. Coordinates are the job's pixels' (a decoded region's, not the file's).
struct crop_axis {
  double start = 0, length = 0;
  int out_total = 0, out_first = 0, lo = 0, hi = 0;
};

struct fused_crop_plan {
  crop_axis x, y;
  int flip = 0;  // 1: mirror the output horizontally
};

// One image of a batch: HWC uint8 pixels (channels 1 or 3; grayscale becomes three equal
// channels), `pitch` bytes between rows, and its plan. Job i writes slot i of the output.
struct fused_crop_job {
  const std::uint8_t* pixels = nullptr;
  std::int64_t pitch = 0;
  int width = 0, height = 0, channels = 3;
  fused_crop_plan plan;
};

// Where the batch goes: slot i starts at element i * slot_stride of `ptr`; a slot holds S x S x 3
// values (NHWC) or 3 x S x S (NCHW) of `dtype`.
struct fused_crop_output {
  void* ptr = nullptr;
  std::int64_t slot_stride = 0;  // elements; 3 * S * S for a dense batch
  int size = 0;                  // S
  crop_layout layout = crop_layout::nchw;
  crop_dtype dtype = crop_dtype::float32;
};

// ToTensor + Normalize as one multiply and one add per channel: v * scale + bias.
struct fused_crop_normalizer {
  float scale[3] = {1, 1, 1}, bias[3] = {0, 0, 0};
};

namespace fused_crop_math {

TB_HD inline double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TB_HD inline float fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TB_HD inline float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// The most taps an output index of `a` can have: make_span_taps' bound, no more than [lo, hi).
TB_HD inline int tap_bound(const crop_axis& a) {
  const double scale = a.length / a.out_total;
  const double support = scale > 1.0 ? scale : 1.0;
  const int bound = static_cast<int>(::ceil(support)) * 2 + 1;
  const int span = a.hi - a.lo;
  return bound < span ? bound : span;
}

// Output index i of the kept range (before any flip): the first source index it reads, its tap
// count (at most tap_bound) and weights, as make_span_taps computes them: raw triangle weights in
// double, zero weights trimmed off both ends, each divided by the sum, then rounded to float.
TB_HD inline int axis_taps(const crop_axis& a, int i, float* weights, int& count) {
  const double scale = a.length / a.out_total;
  const double support = scale > 1.0 ? scale : 1.0;  // std::max(1.0, scale)
  const double center = a.start + dmul(static_cast<double>(a.out_first + i) + 0.5, scale);
  int first_tap = static_cast<int>(::floor(center - support + 0.5));
  if (first_tap < a.lo) first_tap = a.lo;
  int end_tap = static_cast<int>(::floor(center + support + 0.5));
  if (end_tap > a.hi) end_tap = a.hi;
  double total = 0;
  int first = -1, last = -1;  // the first and last taps of non-zero weight
  for (int j = first_tap; j < end_tap; ++j) {
    const double x = (j + 0.5 - center) / support;
    const double r = 1.0 - ::fabs(x);
    const double w = 0.0 < r ? r : 0.0;  // std::max(0.0, r)
    total += w;
    if (w != 0) {
      if (first < 0) first = j;
      last = j;
    }
  }
  if (first < 0) {  // no weight at all: make_span_taps gives no taps
    count = 0;
    return first_tap;
  }
  count = last - first + 1;
  for (int j = first; j <= last; ++j) {
    const double x = (j + 0.5 - center) / support;
    const double r = 1.0 - ::fabs(x);
    const double w = 0.0 < r ? r : 0.0;
    weights[j - first] = static_cast<float>(total > 0 ? w / total : 0);
  }
  return first;
}

// One output pixel's channels before normalisation: per source column the vertical sum of `ny`
// rows (w0 * p0 + w1 * p1 + ..., left to right), then the horizontal sum of `nx` of those columns,
// starting from zero, as crop_resampler does. C (1 or 3) is known at compile time, so the sums
// stay in registers on the device.
template <int C>
TB_HD inline void channel_sums(const std::uint8_t* pixels, std::int64_t pitch, int x0, int nx, const float* wx, int y0,
                               int ny, const float* wy, float acc[C]) {
  for (int c = 0; c < C; ++c) acc[c] = 0;
  for (int kx = 0; kx < nx; ++kx) {
    const std::uint8_t* column =
        pixels + static_cast<std::int64_t>(y0) * pitch + static_cast<std::int64_t>(x0 + kx) * C;
    float v[C];
    for (int c = 0; c < C; ++c) v[c] = fmul(wy[0], static_cast<float>(column[c]));
    for (int ky = 1; ky < ny; ++ky) {
      const std::uint8_t* p = column + static_cast<std::int64_t>(ky) * pitch;
      for (int c = 0; c < C; ++c) v[c] = fadd(v[c], fmul(wy[ky], static_cast<float>(p[c])));
    }
    for (int c = 0; c < C; ++c) acc[c] = fadd(acc[c], fmul(wx[kx], v[c]));
  }
}

// The three channels of one output pixel (grayscale: its one sum, three times). A tap count of
// zero (a plan whose span misses its source range) gives zeros.
TB_HD inline void pixel_sums(const std::uint8_t* pixels, std::int64_t pitch, int channels, int x0, int nx,
                             const float* wx, int y0, int ny, const float* wy, float out[3]) {
  if (ny < 1) nx = 0;
  if (channels == 3) {
    channel_sums<3>(pixels, pitch, x0, nx, wx, y0, ny, wy, out);
  } else {
    channel_sums<1>(pixels, pitch, x0, nx, wx, y0, ny, wy, out);
    out[1] = out[2] = out[0];
  }
}

TB_HD inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// IEEE binary16, round to nearest even (as __float2half_rn and c10::Half).
TB_HD inline std::uint16_t to_half_bits(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and up round to infinity
  if (x < 0x38800000u) {                                                    // below 2^-14: subnormal or zero
    if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);          // up to 2^-25 (a tie): zero
    const int shift = 126 - static_cast<int>(x >> 23);                      // 14 .. 24
    const std::uint32_t m = (x & 0x7fffffu) | 0x800000u;
    std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  const std::uint32_t r = x - 0x38000000u;  // rebias the exponent from 127 to 15
  return static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

// bfloat16, round to nearest even (as __float2bfloat16_rn and c10::BFloat16).
TB_HD inline std::uint16_t to_bfloat16_bits(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Normalises a pixel and stores it in the output at (slot, y, x).
TB_HD inline void store_pixel(const fused_crop_output& out, const fused_crop_normalizer& norm, int slot, int y, int x,
                              const float sums[3]) {
  const std::int64_t s = out.size, plane = s * s;
  const std::int64_t base = slot * out.slot_stride;
  for (int c = 0; c < 3; ++c) {
    const float v = fadd(fmul(sums[c], norm.scale[c]), norm.bias[c]);
    const std::int64_t at = base + (out.layout == crop_layout::nhwc ? (y * s + x) * 3 + c : c * plane + y * s + x);
    if (out.dtype == crop_dtype::float32)
      static_cast<float*>(out.ptr)[at] = v;
    else if (out.dtype == crop_dtype::float16)
      static_cast<std::uint16_t*>(out.ptr)[at] = to_half_bits(v);
    else
      static_cast<std::uint16_t*>(out.ptr)[at] = to_bfloat16_bits(v);
  }
}

}  // namespace fused_crop_math
}  // namespace trainbench
