#include "trainbench/data/fused_crop.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace trainbench {

namespace {

// Clipping [lo, hi) leaves out taps of zero weight only (see fused_plan): the sum of the weights,
// and so every normalised weight, is the same.
crop_axis shifted(const axis_plan& a, int origin, int extent) {
  crop_axis c;
  c.start = a.start - origin;
  c.length = a.length;
  c.out_total = a.out_total;
  c.out_first = a.out_first;
  c.lo = std::max(a.lo - origin, 0);
  c.hi = extent < 0 ? a.hi - origin : std::min(a.hi - origin, extent);
  return c;
}

std::string axis_problem(const crop_axis& a, const char* name, int extent, int size) {
  const std::string n(name);
  if (!(a.length > 0)) return n + ": the span's length is not positive";
  if (a.out_total < 1) return n + ": out_total " + std::to_string(a.out_total) + " is not positive";
  if (a.out_first < 0 || a.out_first + size > a.out_total)
    return n + ": the kept outputs [" + std::to_string(a.out_first) + ", " + std::to_string(a.out_first + size) +
           ") are not inside [0, " + std::to_string(a.out_total) + ")";
  if (a.lo < 0 || a.hi > extent || a.lo >= a.hi)
    return n + ": the source range [" + std::to_string(a.lo) + ", " + std::to_string(a.hi) +
           ") is not a non-empty part of [0, " + std::to_string(extent) + ")";
  return {};
}

// make_span_taps for the kept outputs of one axis, reversed when flipped (crop_resampler's taps).
resize_taps reference_taps(const crop_axis& a, int size, bool flip) {
  resize_taps t = make_span_taps(a.start, a.length, a.out_total, a.out_first, size, a.lo, a.hi);
  if (!flip) return t;
  resize_taps r = t;
  for (int i = 0; i < size; ++i) {
    const int from = size - 1 - i;
    r.start[i] = t.start[from];
    r.count[i] = t.count[from];
    for (int k = 0; k < t.max_taps; ++k)
      r.weights[static_cast<std::size_t>(i) * t.max_taps + k] =
          t.weights[static_cast<std::size_t>(from) * t.max_taps + k];
  }
  return r;
}

void store(const fused_crop_output& out, std::int64_t at, float v) {
  switch (out.dtype) {
    case crop_dtype::float32:
      static_cast<float*>(out.ptr)[at] = v;
      return;
    case crop_dtype::float16:
      static_cast<std::uint16_t*>(out.ptr)[at] = fused_crop_math::to_half_bits(v);
      return;
    case crop_dtype::bfloat16:
      static_cast<std::uint16_t*>(out.ptr)[at] = fused_crop_math::to_bfloat16_bits(v);
      return;
  }
}

}  // namespace

fused_crop_plan fused_plan(const resize_plan& p, int x0, int y0, int width, int height) {
  fused_crop_plan f;
  f.x = shifted(p.x, x0, width);
  f.y = shifted(p.y, y0, height);
  f.flip = p.flip ? 1 : 0;
  return f;
}

plan_region region_of(const resize_plan& p, int width, int height) {
  constexpr int block = 16;
  auto first = [](int lo) { return std::max(0, (lo / block - 1) * block); };
  auto last = [](int hi, int size) { return std::min(size, ((hi + block - 1) / block + 1) * block); };
  const int x0 = first(p.x.lo), y0 = first(p.y.lo);
  return {x0, y0, last(p.x.hi, width) - x0, last(p.y.hi, height) - y0};
}

fused_crop_normalizer fused_normalizer(const normalizer& n) {
  fused_crop_normalizer f;
  for (int c = 0; c < 3; ++c) {
    f.scale[c] = n.scale[c];
    f.bias[c] = n.bias[c];
  }
  return f;
}

int crop_dtype_bytes(crop_dtype dtype) { return dtype == crop_dtype::float32 ? 4 : 2; }

const char* crop_dtype_name(crop_dtype dtype) {
  switch (dtype) {
    case crop_dtype::float32:
      return "float32";
    case crop_dtype::float16:
      return "float16";
    case crop_dtype::bfloat16:
      return "bfloat16";
  }
  return "?";
}

const char* crop_layout_name(crop_layout layout) { return layout == crop_layout::nhwc ? "NHWC" : "NCHW"; }

std::string fused_crop_problem(const fused_crop_job& job, int size) {
  if (!job.pixels) return "no pixels";
  if (job.channels != 1 && job.channels != 3) return "channels " + std::to_string(job.channels) + " (1 or 3 only)";
  if (job.width < 1 || job.height < 1)
    return "image size " + std::to_string(job.width) + "x" + std::to_string(job.height);
  if (job.pitch < static_cast<std::int64_t>(job.width) * job.channels)
    return "pitch " + std::to_string(job.pitch) + " is less than a row's " +
           std::to_string(static_cast<std::int64_t>(job.width) * job.channels) + " bytes";
  std::string p = axis_problem(job.plan.x, "x", job.width, size);
  if (p.empty()) p = axis_problem(job.plan.y, "y", job.height, size);
  return p;
}

std::string fused_crop_output_problem(const fused_crop_output& out, int n) {
  if (!out.ptr) return "no output buffer";
  if (out.size < 1) return "output size " + std::to_string(out.size);
  const std::int64_t slot = 3LL * out.size * out.size;
  if (n > 1 && out.slot_stride < slot)
    return "slot stride " + std::to_string(out.slot_stride) + " is less than a slot's " + std::to_string(slot) +
           " elements";
  const int dtype = static_cast<int>(out.dtype), layout = static_cast<int>(out.layout);
  if (dtype < 0 || dtype > 2) return "dtype " + std::to_string(dtype);
  if (layout < 0 || layout > 1) return "layout " + std::to_string(layout);
  return {};
}

void fused_crop_reference(const fused_crop_job& job, int slot, const fused_crop_output& out,
                          const fused_crop_normalizer& norm) {
  const int s = out.size;
  if (const std::string p = fused_crop_output_problem(out, slot + 1); !p.empty())
    throw std::invalid_argument("fused crop: " + p);
  if (const std::string p = fused_crop_problem(job, s); !p.empty()) throw std::invalid_argument("fused crop: " + p);
  const resize_taps cols = reference_taps(job.plan.x, s, job.plan.flip != 0);
  const resize_taps rows = reference_taps(job.plan.y, s, false);
  const int ch = job.channels;
  const std::int64_t plane = static_cast<std::int64_t>(s) * s, base = slot * out.slot_stride;
  std::vector<float> column(static_cast<std::size_t>(ch));
  for (int y = 0; y < s; ++y) {
    const float* wy = rows.weights.data() + static_cast<std::size_t>(y) * rows.max_taps;
    for (int x = 0; x < s; ++x) {
      const float* wx = cols.weights.data() + static_cast<std::size_t>(x) * cols.max_taps;
      float acc[3] = {0, 0, 0};
      for (int kx = 0; kx < cols.count[x]; ++kx) {
        const std::uint8_t* src = job.pixels + static_cast<std::int64_t>(cols.start[x] + kx) * ch;
        for (int c = 0; c < ch; ++c) {
          // crop_resampler's vertical pass (blend_u8): w0 * p0, then + w1 * p1, ...
          const std::uint8_t* p = src + static_cast<std::int64_t>(rows.start[y]) * job.pitch + c;
          float v = wy[0] * static_cast<float>(p[0]);
          for (int ky = 1; ky < rows.count[y]; ++ky) v += wy[ky] * static_cast<float>(p[ky * job.pitch]);
          // its horizontal pass: from zero, + w0 * v0, + w1 * v1, ...
          acc[c] += wx[kx] * v;
        }
      }
      for (int c = 0; c < 3; ++c) {
        const float v = acc[ch == 1 ? 0 : c] * norm.scale[c] + norm.bias[c];
        store(out,
              base + (out.layout == crop_layout::nhwc ? (static_cast<std::int64_t>(y) * s + x) * 3 + c
                                                      : c * plane + static_cast<std::int64_t>(y) * s + x),
              v);
      }
    }
  }
}

void fused_crop_emulate(const fused_crop_job* jobs, int n, const fused_crop_output& out,
                        const fused_crop_normalizer& norm) {
  if (const std::string p = fused_crop_output_problem(out, n); !p.empty())
    throw std::invalid_argument("fused crop: " + p);
  const int s = out.size;
  for (int i = 0; i < n; ++i) {
    const fused_crop_job& job = jobs[i];
    if (const std::string p = fused_crop_problem(job, s); !p.empty())
      throw std::invalid_argument("fused crop: job " + std::to_string(i) + ": " + p);
    // The kernel's tables: per output column and row its first tap, count and weights.
    const int bx = fused_crop_math::tap_bound(job.plan.x), by = fused_crop_math::tap_bound(job.plan.y);
    std::vector<float> wx(static_cast<std::size_t>(s) * bx), wy(static_cast<std::size_t>(s) * by);
    std::vector<int> x0(static_cast<std::size_t>(s)), nx(static_cast<std::size_t>(s)), y0(static_cast<std::size_t>(s)),
        ny(static_cast<std::size_t>(s));
    for (int k = 0; k < s; ++k) {
      const int from = job.plan.flip ? s - 1 - k : k;
      x0[k] = fused_crop_math::axis_taps(job.plan.x, from, wx.data() + static_cast<std::size_t>(k) * bx, nx[k]);
      y0[k] = fused_crop_math::axis_taps(job.plan.y, k, wy.data() + static_cast<std::size_t>(k) * by, ny[k]);
    }
    for (int y = 0; y < s; ++y)
      for (int x = 0; x < s; ++x) {
        float sums[3];
        fused_crop_math::pixel_sums(job.pixels, job.pitch, job.channels, x0[x], nx[x],
                                    wx.data() + static_cast<std::size_t>(x) * bx, y0[y], ny[y],
                                    wy.data() + static_cast<std::size_t>(y) * by, sums);
        fused_crop_math::store_pixel(out, norm, i, y, x, sums);
      }
  }
}

}  // namespace trainbench
