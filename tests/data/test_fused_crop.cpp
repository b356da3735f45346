// The fused crop's CPU side: its reference against the host path (crop_resampler), the kernel's
// arithmetic (fused_crop_math, run on the host) against the reference, and the dtype roundings.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <ATen/ATen.h>

#include "trainbench/data/crop.hpp"
#include "trainbench/data/crop_tensor.hpp"
#if TRAINBENCH_CUDA
#include "trainbench/cuda/fused_crop.hpp"
#endif
#include "trainbench/data/fused_crop.hpp"

using namespace trainbench;

namespace {

struct test_image {
  int width = 0, height = 0, channels = 3;
  std::int64_t pitch = 0;
  std::vector<std::uint8_t> bytes;
  const std::uint8_t* at(int x, int y) const {
    return bytes.data() + y * pitch + static_cast<std::int64_t>(x) * channels;
  }
};

// Random pixels, with a few bytes of padding after each row (pitch > width * channels).
test_image random_image(std::mt19937& rng, int width, int height, int channels) {
  test_image im;
  im.width = width;
  im.height = height;
  im.channels = channels;
  im.pitch = static_cast<std::int64_t>(width) * channels + static_cast<int>(rng() % 5);
  im.bytes.resize(static_cast<std::size_t>(im.pitch * height));
  for (auto& b : im.bytes) b = static_cast<std::uint8_t>(rng());
  return im;
}

struct test_case {
  resize_plan plan;
  int size = 0;
};

// Train plans (RandomResizedCrop + flip) of every scale, and eval plans (Resize + CenterCrop).
test_case random_case(std::mt19937& rng, const test_image& im, int index) {
  static const int sizes[] = {1, 5, 8, 17, 24, 32, 64};
  test_case c;
  c.size = sizes[rng() % (sizeof sizes / sizeof sizes[0])];
  if (index % 4 == 3) {
    c.plan = eval_plan(im.height, im.width, c.size);
    return c;
  }
  sample_rng sr(static_cast<std::uint64_t>(rng()), 0, index);
  const crop_box box = random_resized_crop(im.height, im.width, sr);
  c.plan = train_plan(box, c.size, (rng() & 1) != 0);
  return c;
}

normalizer test_normalizer() { return normalizer({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}); }

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("fused crop reference: the host path's crop_resampler bit for bit in float32, on regions too") {
  std::mt19937 rng(41);
  const normalizer norm = test_normalizer();
  int checked = 0;
  for (int i = 0; i < 120; ++i) {
    const int w = 1 + static_cast<int>(rng() % 300), h = 1 + static_cast<int>(rng() % 300);
    const int channels = i % 3 == 2 ? 1 : 3;
    const test_image im = random_image(rng, w, h, channels);
    const test_case c = random_case(rng, im, i);
    const bool nhwc = (i & 1) != 0;
    INFO("image " << w << "x" << h << "x" << channels << ", S " << c.size << ", flip " << c.plan.flip << ", "
                  << (nhwc ? "NHWC" : "NCHW"));
    crop_resampler rs;
    const jpeg_region r = rs.prepare(c.plan, 1, h, w, c.size);
    // The host path's input: only the decoded region the taps read, as a partial decode gives.
    decoded_pixels px;
    px.data = im.at(r.x0, r.y0);
    px.x0 = r.x0;
    px.y0 = r.y0;
    px.width = r.x1 - r.x0;
    px.rows = r.y1 - r.y0;
    px.channels = channels;
    px.stride = static_cast<std::size_t>(im.pitch);
    const std::size_t n = 3 * static_cast<std::size_t>(c.size) * c.size;
    std::vector<float> want(n), got(n, -1.f), whole(n, -1.f);
    rs.resample(px, norm, nhwc, want.data());

    fused_crop_output out;
    out.size = c.size;
    out.slot_stride = static_cast<std::int64_t>(n);
    out.layout = nhwc ? crop_layout::nhwc : crop_layout::nchw;
    out.dtype = crop_dtype::float32;
    // The region, in its own coordinates.
    fused_crop_job job;
    job.pixels = px.data;
    job.pitch = im.pitch;
    job.width = px.width;
    job.height = px.rows;
    job.channels = channels;
    job.plan = fused_plan(c.plan, r.x0, r.y0, r.x1 - r.x0, r.y1 - r.y0);
    out.ptr = got.data();
    fused_crop_reference(job, 0, out, fused_normalizer(norm));
    // The whole image, in the file's coordinates.
    fused_crop_job full = job;
    full.pixels = im.bytes.data();
    full.width = w;
    full.height = h;
    full.plan = fused_plan(c.plan);
    out.ptr = whole.data();
    fused_crop_reference(full, 0, out, fused_normalizer(norm));
    std::size_t differ = 0, differ_whole = 0;
    for (std::size_t k = 0; k < n; ++k) {
      differ += bits(got[k]) != bits(want[k]);
      differ_whole += bits(whole[k]) != bits(want[k]);
    }
    CHECK(differ == 0);
    CHECK(differ_whole == 0);
    checked += static_cast<int>(n);
  }
  CHECK(checked > 100000);
}

TEST_CASE("fused crop: the plan's own region (a device decode's region of interest) crops as the whole image") {
  std::mt19937 rng(43);
  const normalizer norm = test_normalizer();
  int smaller = 0, shifted_both = 0;
  for (int i = 0; i < 160; ++i) {
    const int w = 1 + static_cast<int>(rng() % 600), h = 1 + static_cast<int>(rng() % 600);
    const test_image im = random_image(rng, w, h, 3);
    const test_case c = random_case(rng, im, i);
    const bool nhwc = (i & 1) != 0;
    INFO("image " << w << "x" << h << ", S " << c.size << ", flip " << c.plan.flip);
    const plan_region r = region_of(c.plan, w, h);
    REQUIRE(r.x0 >= 0);
    REQUIRE(r.y0 >= 0);
    CHECK(r.x0 % 16 == 0);
    CHECK(r.y0 % 16 == 0);
    // Every pixel the taps read, and a block more where the file has one.
    CHECK(r.x0 <= std::max(0, c.plan.x.lo - 16));
    CHECK(r.y0 <= std::max(0, c.plan.y.lo - 16));
    CHECK(r.x0 + r.width >= std::min(w, c.plan.x.hi + 16));
    CHECK(r.y0 + r.height >= std::min(h, c.plan.y.hi + 16));
    REQUIRE(r.x0 + r.width <= w);
    REQUIRE(r.y0 + r.height <= h);
    smaller += static_cast<std::int64_t>(r.width) * r.height < static_cast<std::int64_t>(w) * h;
    shifted_both += r.x0 > 0 && r.y0 > 0;
    // The region copied out densely, as a decoder of the region alone writes it.
    std::vector<std::uint8_t> roi(static_cast<std::size_t>(r.width) * r.height * 3);
    for (int y = 0; y < r.height; ++y)
      std::memcpy(roi.data() + static_cast<std::size_t>(y) * r.width * 3, im.at(r.x0, r.y0 + y),
                  static_cast<std::size_t>(r.width) * 3);
    const std::size_t n = 3 * static_cast<std::size_t>(c.size) * c.size;
    std::vector<float> got(n, -1.f), whole(n, -2.f);
    fused_crop_output out;
    out.size = c.size;
    out.slot_stride = static_cast<std::int64_t>(n);
    out.layout = nhwc ? crop_layout::nhwc : crop_layout::nchw;
    out.dtype = crop_dtype::float32;
    fused_crop_job job{roi.data(), 3LL * r.width, r.width, r.height, 3,
                       fused_plan(c.plan, r.x0, r.y0, r.width, r.height)};
    REQUIRE(fused_crop_problem(job, c.size).empty());
    out.ptr = got.data();
    fused_crop_reference(job, 0, out, fused_normalizer(norm));
    const fused_crop_job full{im.bytes.data(), im.pitch, w, h, 3, fused_plan(c.plan)};
    out.ptr = whole.data();
    fused_crop_reference(full, 0, out, fused_normalizer(norm));
    std::size_t differ = 0;
    for (std::size_t k = 0; k < n; ++k) differ += bits(got[k]) != bits(whole[k]);
    CHECK(differ == 0);
  }
  CHECK(smaller > 80);       // most train crops need well under the whole file
  CHECK(shifted_both > 20);  // and the shift is tested on both axes at once
}

// The device decode's ATen fallback: the same taps as the reference, summed in another order, for
// files' regions and for a worker's DCT-scaled pixels with their scaled (fractional) plans.
TEST_CASE("crop_by_taps (the device decode's ATen fallback) is the fused crop's reference within float rounding, "
          "DCT-scaled plans too") {
  std::mt19937 rng(47);
  fused_crop_normalizer identity;
  for (int c = 0; c < 3; ++c) {
    identity.scale[c] = 1.f;
    identity.bias[c] = 0.f;
  }
  int scaled = 0, flipped = 0;
  for (int i = 0; i < 120; ++i) {
    const int w = 8 + static_cast<int>(rng() % 600), h = 8 + static_cast<int>(rng() % 600);
    const test_image full = random_image(rng, w, h, 3);
    const test_case c = random_case(rng, full, i);
    // The pixels a worker ships: the region of the image at the host path's DCT scale.
    const int scale = dct_scale(c.plan);
    const resize_plan shipped = scaled_plan(c.plan, scale, h, w);
    const int sw = jpeg_decoder::scaled(w, scale), sh = jpeg_decoder::scaled(h, scale);
    const plan_region r = region_of(shipped, sw, sh);
    INFO("image " << w << "x" << h << ", scale " << scale << ", S " << c.size << ", flip " << c.plan.flip);
    scaled += scale > 1;
    flipped += c.plan.flip;
    const test_image im = random_image(rng, r.width, r.height, 3);
    std::vector<std::uint8_t> dense(static_cast<std::size_t>(r.width) * r.height * 3);
    for (int y = 0; y < r.height; ++y)
      std::memcpy(dense.data() + static_cast<std::size_t>(y) * r.width * 3, im.at(0, y),
                  static_cast<std::size_t>(r.width) * 3);
    const fused_crop_job job{dense.data(), 3LL * r.width, r.width, r.height, 3,
                             fused_plan(shipped, r.x0, r.y0, r.width, r.height)};
    REQUIRE(fused_crop_problem(job, c.size).empty());
    const std::size_t n = 3 * static_cast<std::size_t>(c.size) * c.size;
    std::vector<float> want(n, -1.f);
    fused_crop_output out;
    out.ptr = want.data();
    out.size = c.size;
    out.slot_stride = static_cast<std::int64_t>(n);
    out.layout = crop_layout::nchw;
    out.dtype = crop_dtype::float32;
    fused_crop_reference(job, 0, out, identity);
    const at::Tensor pixels = at::from_blob(dense.data(), {r.height, r.width, 3}, at::kByte);
    const at::Tensor got = crop_by_taps(pixels, job.plan, c.size);
    REQUIRE(got.sizes() == at::IntArrayRef({3, c.size, c.size}));
    const at::Tensor expected = at::from_blob(want.data(), {3, c.size, c.size}, at::kFloat);
    CHECK((got - expected).abs().max().item<double>() < 2e-3);  // of 255: float sums in another order
  }
  CHECK(scaled > 10);
  CHECK(flipped > 20);
}

TEST_CASE("fused crop: the kernel's arithmetic on the host equals the reference bit for bit, every dtype and layout") {
  std::mt19937 rng(7);
  const fused_crop_normalizer norm = fused_normalizer(test_normalizer());
  for (crop_dtype dtype : {crop_dtype::float32, crop_dtype::float16, crop_dtype::bfloat16})
    for (crop_layout layout : {crop_layout::nchw, crop_layout::nhwc}) {
      INFO(crop_dtype_name(dtype) << " " << crop_layout_name(layout));
      const int size = dtype == crop_dtype::float32 ? 24 : 17, batch = 12;
      std::vector<test_image> images;
      std::vector<fused_crop_job> jobs;
      for (int i = 0; i < batch; ++i) {
        const int w = 2 + static_cast<int>(rng() % 400), h = 2 + static_cast<int>(rng() % 400);
        images.push_back(random_image(rng, w, h, i % 4 == 1 ? 1 : 3));
      }
      for (int i = 0; i < batch; ++i) {
        const test_image& im = images[static_cast<std::size_t>(i)];
        sample_rng sr(rng(), 1, i);
        const resize_plan plan = i % 4 == 3
                                     ? eval_plan(im.height, im.width, size)
                                     : train_plan(random_resized_crop(im.height, im.width, sr), size, i % 2 == 0);
        fused_crop_job j;
        j.pixels = im.bytes.data();
        j.pitch = im.pitch;
        j.width = im.width;
        j.height = im.height;
        j.channels = im.channels;
        j.plan = fused_plan(plan);
        jobs.push_back(j);
      }
      const int bytes = crop_dtype_bytes(dtype);
      const std::int64_t stride = 3LL * size * size + 11;  // slots with a gap between them
      std::vector<std::uint8_t> want(static_cast<std::size_t>(stride * batch * bytes), 0xAB), got = want;
      fused_crop_output out;
      out.size = size;
      out.slot_stride = stride;
      out.layout = layout;
      out.dtype = dtype;
      out.ptr = want.data();
      for (int i = 0; i < batch; ++i) fused_crop_reference(jobs[static_cast<std::size_t>(i)], i, out, norm);
      out.ptr = got.data();
      fused_crop_emulate(jobs.data(), batch, out, norm);
      CHECK(got == want);
      // The gaps between slots are untouched.
      for (int i = 0; i < batch; ++i)
        for (std::int64_t k = 3LL * size * size * bytes; k < stride * bytes; ++k)
          CHECK(want[static_cast<std::size_t>(i * stride * bytes + k)] == 0xAB);
      // float16 and bfloat16 are the float32 values rounded.
      if (dtype != crop_dtype::float32) {
        std::vector<float> f32(static_cast<std::size_t>(stride * batch));
        fused_crop_output o32 = out;
        o32.dtype = crop_dtype::float32;
        o32.ptr = f32.data();
        fused_crop_emulate(jobs.data(), batch, o32, norm);
        std::size_t differ = 0;
        for (int i = 0; i < batch; ++i)
          for (std::int64_t k = 0; k < 3LL * size * size; ++k) {
            const std::size_t at = static_cast<std::size_t>(i * stride + k);
            std::uint16_t h;
            std::memcpy(&h, got.data() + at * 2, 2);
            const std::uint16_t expect = dtype == crop_dtype::float16 ? c10::Half(f32[at]).x : c10::BFloat16(f32[at]).x;
            differ += h != expect;
          }
        CHECK(differ == 0);
      }
    }
}

TEST_CASE("fused crop: float16 and bfloat16 round to nearest even as c10::Half and c10::BFloat16") {
  std::vector<float> values = {0.f,
                               -0.f,
                               1.f,
                               -1.f,
                               65504.f,
                               65519.f,
                               65520.f,
                               -65520.f,
                               1e-8f,
                               2.98023224e-8f,
                               2.98023254e-8f,
                               5.96046448e-8f,
                               6.1035156e-5f,
                               6.1e-5f,
                               3e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min()};
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = rng();
    if (i % 2) u = (u & 0x807fffffu) | ((100u + (u >> 24) % 60u) << 23);  // exponents around binary16's range
    float f;
    std::memcpy(&f, &u, sizeof f);
    if (!std::isnan(f)) values.push_back(f);
  }
  std::size_t half_differ = 0, bf16_differ = 0;
  for (float f : values) {
    half_differ += fused_crop_math::to_half_bits(f) != c10::Half(f).x;
    bf16_differ += fused_crop_math::to_bfloat16_bits(f) != c10::BFloat16(f).x;
  }
  CHECK(half_differ == 0);
  CHECK(bf16_differ == 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK((fused_crop_math::to_half_bits(nan) & 0x7fffu) > 0x7c00u);
  CHECK(fused_crop_math::to_bfloat16_bits(nan) == 0x7fc0u);
}

TEST_CASE("fused crop: a job or output it cannot crop is refused with what is wrong") {
  std::vector<std::uint8_t> px(30 * 20 * 3);
  fused_crop_job j;
  j.pixels = px.data();
  j.pitch = 90;
  j.width = 30;
  j.height = 20;
  j.plan = fused_plan(train_plan({2, 3, 10, 12}, 8, false));
  CHECK(fused_crop_problem(j, 8).empty());
  auto bad = j;
  bad.channels = 4;
  CHECK(fused_crop_problem(bad, 8).find("channels 4") != std::string::npos);
  bad = j;
  bad.pitch = 89;
  CHECK(fused_crop_problem(bad, 8).find("pitch 89") != std::string::npos);
  bad = j;
  bad.plan.x.hi = 31;
  CHECK(fused_crop_problem(bad, 8).find("x: the source range [3, 31)") != std::string::npos);
  bad = j;
  bad.plan.y.lo = bad.plan.y.hi;
  CHECK(fused_crop_problem(bad, 8).find("y: the source range") != std::string::npos);
  CHECK(fused_crop_problem(j, 9).find("x: the kept outputs [0, 9) are not inside [0, 8)") != std::string::npos);
  bad = j;
  bad.pixels = nullptr;
  CHECK(fused_crop_problem(bad, 8) == "no pixels");
  fused_crop_output out;
  out.size = 8;
  CHECK(fused_crop_output_problem(out, 1) == "no output buffer");
  std::vector<float> dst(3 * 8 * 8 * 2);
  out.ptr = dst.data();
  out.slot_stride = 100;
  CHECK(fused_crop_output_problem(out, 2).find("slot stride 100") != std::string::npos);
  CHECK(fused_crop_output_problem(out, 1).empty());
  CHECK_THROWS_WITH(fused_crop_reference(bad, 0, out, {}), "fused crop: no pixels");
  CHECK_THROWS_WITH(fused_crop_emulate(&bad, 1, out, {}), "fused crop: job 0: no pixels");
}

#if TRAINBENCH_CUDA
// The checks come before any CUDA call, so a host without a GPU runs this.
TEST_CASE("fused crop launcher: a bad job or output is refused before anything reaches the device") {
  std::vector<std::uint8_t> px(30 * 20 * 3);
  std::vector<fused_crop_job> jobs(2);
  for (auto& j : jobs) {
    j.pixels = px.data();
    j.pitch = 90;
    j.width = 30;
    j.height = 20;
    j.plan = fused_plan(train_plan({2, 3, 10, 12}, 8, false));
  }
  jobs[1].channels = 2;
  std::vector<float> dst(2 * 3 * 8 * 8);
  fused_crop_output out;
  out.ptr = dst.data();
  out.size = 8;
  out.slot_stride = 3 * 8 * 8;
  fused_crop_launcher launcher;
  CHECK_THROWS_WITH(launcher.launch(jobs.data(), 2, out, {}, nullptr), "fused crop: job 1: channels 2 (1 or 3 only)");
  out.slot_stride = 10;
  CHECK_THROWS_WITH(launcher.launch(jobs.data(), 2, out, {}, nullptr),
                    "fused crop: slot stride 10 is less than a slot's 192 elements");
  launcher.launch(jobs.data(), 0, out, {}, nullptr);  // nothing to do
  out.slot_stride = 3 * 8 * 8;
  // 2000 columns shrunk to 8: 501 taps a pixel, more shared memory than a block has.
  std::vector<std::uint8_t> wide(2000 * 3);
  fused_crop_job j = jobs[0];
  j.pixels = wide.data();
  j.width = 2000;
  j.height = 1;
  j.pitch = 6000;
  j.plan = fused_plan(train_plan({0, 0, 1, 2000}, 8, false));
  CHECK_THROWS_WITH(launcher.launch(&j, 1, out, {}, nullptr), Catch::Contains("shared memory"));
  CHECK(launcher.tables() == 0);
  // fits() says so beforehand, so the device crop stage crops such a batch by other means.
  CHECK_FALSE(fused_crop_launcher::fits(&j, 1));
  CHECK(fused_crop_launcher::fits(jobs.data(), 1));
  const fused_crop_job mixed[2] = {jobs[0], j};
  CHECK_FALSE(fused_crop_launcher::fits(mixed, 2));
  // 1000 columns to 8: 251 taps, within a block's shared memory.
  j.plan = fused_plan(train_plan({0, 0, 1, 1000}, 8, false));
  CHECK(fused_crop_launcher::fits(&j, 1));
}
#endif
