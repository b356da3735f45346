// Host JPEG decoding and torchvision's transform semantics, against fixtures made by torchvision
// (scripts/make-jpeg-fixture.py).
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>

#include "helpers.hpp"
#include "trainbench/data/crop.hpp"
#include "trainbench/data/jpeg.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path fixture(const std::string& name) { return tbtest::source_dir() / "tests/fixtures/jpeg" / name; }

// Normalize with mean 0 and std 1/255: the slot then holds the resampled values in 0..255.
const normalizer identity({0, 0, 0}, {1 / 255.0, 1 / 255.0, 1 / 255.0});

// One image through the reader's steps with a given plan: planar floats in 0..255.
struct transformed {
  std::vector<float> planes;
  int channels = 0, scale = 1;
};
transformed run_plan(const std::vector<std::uint8_t>& bytes, const resize_plan& plan, int size, bool dct) {
  jpeg_decoder dec;
  crop_resampler rs;
  const jpeg_info info = dec.open(bytes.data(), bytes.size(), 1 << 30);
  transformed t;
  t.scale = dct ? dct_scale(plan) : 1;
  const jpeg_region r = rs.prepare(plan, t.scale, info.height, info.width, size);
  const decoded_pixels px = dec.decode(r);
  t.channels = px.channels == 1 ? 1 : 3;
  t.planes.resize(3 * static_cast<std::size_t>(size) * size);
  rs.resample(px, identity, false, t.planes.data());
  return t;
}

resize_plan plan_of(const nlohmann::json& c, const jpeg_info& info) {
  const int size = c["size"];
  if (c["box"].is_null()) return eval_plan(info.height, info.width, size);
  const auto b = c["box"].get<std::vector<int>>();
  return train_plan(crop_box{b[0], b[1], b[2], b[3]}, size, c["flip"].get<bool>());
}

// Largest difference to torchvision's uint8 output, in 1/255 units (grayscale compared on all three).
double max_error(const transformed& t, const std::vector<int>& expected, int size) {
  const std::size_t plane = static_cast<std::size_t>(size) * size;
  double worst = 0;
  for (std::size_t c = 0; c < 3; ++c)
    for (std::size_t i = 0; i < plane; ++i)
      worst = std::max(worst, std::abs(double(t.planes[c * plane + i]) - expected[c * plane + i]));
  return worst;
}

double mean_error(const transformed& t, const std::vector<int>& expected, int size) {
  const std::size_t plane = static_cast<std::size_t>(size) * size;
  double sum = 0;
  for (std::size_t c = 0; c < 3; ++c)
    for (std::size_t i = 0; i < plane; ++i) sum += std::abs(double(t.planes[c * plane + i]) - expected[c * plane + i]);
  return sum / (3.0 * plane);
}

}  // namespace

TEST_CASE("decode + crop + resize matches torchvision's decode_jpeg + resized_crop within 2/255") {
  const auto fix = tbtest::read_json(tbtest::source_dir() / "tests/fixtures/torchvision_crops.json");
  for (const auto& c : fix["cases"]) {
    const std::string name = c["file"];
    const int size = c["size"];
    INFO(name << " box " << c["box"].dump() << " -> " << size << (c["flip"].get<bool>() ? " flipped" : ""));
    const auto bytes = read_bytes(fixture(name));
    jpeg_decoder dec;
    const jpeg_info info = dec.open(bytes.data(), bytes.size(), 1 << 30);
    const resize_plan plan = plan_of(c, info);
    const auto expected = c["expected_chw"].get<std::vector<int>>();
    // Full-resolution decode of the crop's rows and columns: torchvision's numbers.
    const transformed full = run_plan(bytes, plan, size, false);
    CHECK(max_error(full, expected, size) <= 2.0);
    // DCT-scaled decode (where the crop allows it) approximates the same filter: close, not equal.
    const transformed scaled = run_plan(bytes, plan, size, true);
    if (scaled.scale > 1) {
      CHECK(mean_error(scaled, expected, size) <= 2.0);
      CHECK(max_error(scaled, expected, size) <= 24.0);
    }
  }
}

namespace {

// The resampling written out plainly, in double: each output is the weighted sum of the decoded
// pixels under its row taps and column taps, then (v / 255 - mean) / std.
std::vector<double> plain_resample(const decoded_pixels& px, const resize_plan& plan, int size,
                                   const std::vector<double>& mean, const std::vector<double>& sd) {
  const axis_plan& ax = plan.x;
  const axis_plan& ay = plan.y;
  resize_taps cols = make_span_taps(ax.start, ax.length, ax.out_total, ax.out_first, size, ax.lo, ax.hi);
  const resize_taps rows = make_span_taps(ay.start, ay.length, ay.out_total, ay.out_first, size, ay.lo, ay.hi);
  std::vector<double> out(3 * static_cast<std::size_t>(size) * size);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      const int xs = plan.flip ? size - 1 - x : x;
      for (int c = 0; c < 3; ++c) {
        double v = 0;
        for (int i = 0; i < rows.count[y]; ++i)
          for (int j = 0; j < cols.count[xs]; ++j) {
            const int sy = rows.start[y] + i - px.y0, sx = cols.start[xs] + j - px.x0;
            const std::uint8_t p = px.data[sy * px.stride + sx * px.channels + (px.channels == 1 ? 0 : c)];
            v += rows.weights[y * rows.max_taps + i] * cols.weights[xs * cols.max_taps + j] * p;
          }
        out[(c * size + y) * size + x] = (v / 255 - mean[c]) / sd[c];
      }
    }
  return out;
}

}  // namespace

TEST_CASE("every output size, flip and layout resamples and normalises the same pixels") {
  const std::vector<double> mean{0.485, 0.456, 0.406}, sd{0.229, 0.224, 0.225};
  const normalizer norm(mean, sd);
  for (const char* name : {"color420.jpg", "gray.jpg"}) {
    const auto bytes = read_bytes(fixture(name));
    // 1..40 covers outputs below eight and every remainder after groups of eight; 56 upsamples.
    for (int size : {1, 3, 7, 8, 9, 15, 16, 17, 23, 31, 33, 40, 56}) {
      for (bool flip : {false, true}) {
        INFO(name << " -> " << size << (flip ? " flipped" : ""));
        jpeg_decoder dec;
        crop_resampler rs;
        const jpeg_info info = dec.open(bytes.data(), bytes.size(), 1 << 30);
        const resize_plan plan = train_plan({5, 9, info.height - 12, info.width - 20}, size, flip);
        const jpeg_region region = rs.prepare(plan, 1, info.height, info.width, size);
        const decoded_pixels px = dec.decode(region);
        const std::vector<double> want = plain_resample(px, plan, size, mean, sd);
        const std::size_t plane = static_cast<std::size_t>(size) * size;
        std::vector<float> nchw(3 * plane), nhwc(3 * plane);
        rs.resample(px, norm, false, nchw.data());
        rs.resample(px, norm, true, nhwc.data());
        double worst = 0, layouts = 0;
        for (std::size_t c = 0; c < 3; ++c)
          for (std::size_t i = 0; i < plane; ++i) {
            worst = std::max(worst, std::abs(nchw[c * plane + i] - want[c * plane + i]));
            layouts = std::max(layouts, double(std::abs(nhwc[i * 3 + c] - nchw[c * plane + i])));
          }
        CHECK(worst < 1e-4);  // float sums of 0..255 values, then / (255 std)
        CHECK(layouts == 0);
      }
    }
  }
}

// A progressive 4:2:0 file whose AC coefficients are never refined: libjpeg smooths its blocks.
std::vector<std::uint8_t> unrefined_progressive() {
  const int w = 150, h = 110;
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  std::uint32_t state = 3;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        state = state * 1664525u + 1013904223u;
        px[(static_cast<std::size_t>(y) * w + x) * 3 + c] =
            static_cast<std::uint8_t>((x * 7 + y * 3 + c * 50 + (state >> 26) + ((x / 13 + y / 11) % 2) * 90) & 255);
      }
  jpeg_encode_options o;
  o.quality = 75;
  o.progressive = true;
  o.unrefined = true;
  return encode_jpeg(px.data(), w, h, 3, o);
}

TEST_CASE("partial decoding gives exactly the pixels of a full decode") {
  for (const char* name : {"color420.jpg", "color444.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg", "unrefined"}) {
    for (int scale : {1, 2}) {
      const auto bytes = std::string(name) == "unrefined" ? unrefined_progressive() : read_bytes(fixture(name));
      jpeg_decoder full_dec, part_dec;
      const jpeg_info info = full_dec.open(bytes.data(), bytes.size(), 1 << 30);
      const int w = jpeg_decoder::scaled(info.width, scale), h = jpeg_decoder::scaled(info.height, scale);
      const decoded_pixels full = full_dec.decode({scale, 0, w, 0, h});
      // Left and right edges at every phase of a 16-pixel iMCU, and at the image's own edges.
      for (int x0 = 0; x0 < 18 && x0 < w - 2; ++x0) {
        for (int x1 : {x0 + 1, x0 + 2, w - x0 / 2, w}) {
          if (x1 <= x0 || x1 > w) continue;
          INFO(name << " at 1/" << scale << ", columns [" << x0 << ", " << x1 << ")");
          part_dec.open(bytes.data(), bytes.size(), 1 << 30);
          const jpeg_region region{scale, x0, x1, x0 % 5, h - x0 % 3};
          const decoded_pixels part = part_dec.decode(region);
          REQUIRE(part.x0 <= region.x0);
          REQUIRE(part.x0 + part.width >= region.x1);
          REQUIRE(part.rows == region.y1 - region.y0);
          REQUIRE(part.channels == full.channels);
          std::size_t differing = 0;
          for (int y = 0; y < part.rows; ++y)
            for (int x = region.x0; x < region.x1; ++x)
              for (int c = 0; c < part.channels; ++c)
                differing += part.data[y * part.stride + (x - part.x0) * part.channels + c] !=
                             full.data[(y + region.y0) * full.stride + x * full.channels + c];
          CHECK(differing == 0);
        }
      }
    }
  }
}

TEST_CASE("grayscale, CMYK and progressive files decode, and the header says what they are") {
  jpeg_decoder dec;
  auto gray = read_bytes(fixture("gray.jpg"));
  CHECK(dec.open(gray.data(), gray.size(), 1 << 30).channels == 1);
  auto cmyk = read_bytes(fixture("cmyk.jpg"));
  CHECK(dec.open(cmyk.data(), cmyk.size(), 1 << 30).channels == 3);
  auto prog = read_bytes(fixture("progressive.jpg"));
  const jpeg_info p = dec.open(prog.data(), prog.size(), 1 << 30);
  CHECK(p.progressive);
  CHECK(p.width == 90);
  CHECK(p.height == 70);
}

namespace {

// Rows [y0, y1) and columns [x0, x1) of an opened image at full resolution, as packed bytes.
std::vector<std::uint8_t> region_bytes(jpeg_decoder& dec, const jpeg_region& r) {
  const decoded_pixels px = dec.decode(r);
  std::vector<std::uint8_t> out;
  for (int y = 0; y < px.rows; ++y) {
    const std::uint8_t* row = px.data + y * px.stride + (r.x0 - px.x0) * px.channels;
    out.insert(out.end(), row, row + (r.x1 - r.x0) * px.channels);
  }
  return out;
}

// What a Motion Photo appends after the image: an MP4 (here 64 KiB standing in for one, with a
// JPEG-like FF D8 ... FF D9 inside it, far from its end).
std::vector<std::uint8_t> with_video(std::vector<std::uint8_t> bytes) {
  const std::uint8_t box[] = {0, 0, 0, 24, 'f', 't', 'y', 'p', 'm', 'p', '4', '2'};
  bytes.insert(bytes.end(), std::begin(box), std::end(box));
  for (int i = 0; i < 65536; ++i) bytes.push_back(static_cast<std::uint8_t>((i * 131 + 7) % 251));  // never 0xFF
  const std::size_t inner = bytes.size() - 60000;
  const std::uint8_t jpeg_like[] = {0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xD9};
  std::copy(std::begin(jpeg_like), std::end(jpeg_like), bytes.begin() + static_cast<long>(inner));
  return bytes;
}

}  // namespace

TEST_CASE("data after the end-of-image marker (a Motion Photo's video) is ignored: the same pixels") {
  for (const char* name : {"color420.jpg", "progressive.jpg", "gray.jpg"}) {
    INFO(name);
    const auto plain = read_bytes(fixture(name));
    const auto photo = with_video(plain);
    jpeg_decoder a, b;
    const jpeg_info info = a.open(plain.data(), plain.size(), 1 << 30);
    const jpeg_info same = b.open(photo.data(), photo.size(), 1 << 30);
    CHECK(same.width == info.width);
    CHECK(same.height == info.height);
    const jpeg_region whole{1, 0, info.width, 0, info.height};
    CHECK(region_bytes(b, whole) == region_bytes(a, whole));
    const jpeg_region crop{1, 3, info.width / 2, 2, info.height / 2};
    a.open(plain.data(), plain.size(), 1 << 30);
    b.open(photo.data(), photo.size(), 1 << 30);
    CHECK(region_bytes(b, crop) == region_bytes(a, crop));
  }
}

TEST_CASE("CMYK decodes to torchvision's decode_jpeg(mode=RGB) pixels exactly, with or without an Adobe marker") {
  const auto fix = tbtest::read_json(tbtest::source_dir() / "tests/fixtures/cmyk_rgb.json");
  const auto expected = fix["expected_hwc"].get<std::vector<int>>();
  const int h = fix["height"], w = fix["width"];
  const auto adobe = read_bytes(fixture(fix["file"].get<std::string>()));
  // The same file without its APP14 "Adobe" segment: libjpeg then reads the four components as
  // plain CMYK, and torchvision (and PIL) still assume Adobe's inverted polarity.
  std::vector<std::uint8_t> plain;
  for (std::size_t i = 2; i + 4 < adobe.size(); ++i) {
    if (adobe[i] == 0xFF && adobe[i + 1] == 0xEE) {
      const std::size_t length = static_cast<std::size_t>(adobe[i + 2]) << 8 | adobe[i + 3];
      plain.assign(adobe.begin(), adobe.begin() + static_cast<long>(i));
      plain.insert(plain.end(), adobe.begin() + static_cast<long>(i + 2 + length), adobe.end());
      break;
    }
  }
  REQUIRE_FALSE(plain.empty());
  const std::vector<std::uint8_t>* files[] = {&adobe, &plain};
  for (const auto* bytes : files) {
    INFO((bytes == &adobe ? "with" : "without") << " the Adobe marker");
    jpeg_decoder dec;
    const jpeg_info info = dec.open(bytes->data(), bytes->size(), 1 << 30);
    REQUIRE(info.channels == 3);
    REQUIRE((info.width == w && info.height == h));
    const auto got = region_bytes(dec, {1, 0, w, 0, h});
    REQUIRE(got.size() == expected.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differing += got[i] != expected[i];
    CHECK(differing == 0);
  }
}

namespace {

// `bytes` with `extra` inserted just before its end-of-image marker (the file's last two bytes).
std::vector<std::uint8_t> before_end(std::vector<std::uint8_t> bytes, const std::vector<std::uint8_t>& extra) {
  bytes.insert(bytes.end() - 2, extra.begin(), extra.end());
  return bytes;
}

// The file's SOS segment (marker, length and header), as a second scan would start.
std::vector<std::uint8_t> sos_segment(const std::vector<std::uint8_t>& bytes) {
  for (std::size_t i = 2; i + 4 < bytes.size(); ++i)
    if (bytes[i] == 0xFF && bytes[i + 1] == 0xDA) {
      const std::size_t length = static_cast<std::size_t>(bytes[i + 2]) << 8 | bytes[i + 3];
      return {bytes.begin() + static_cast<long>(i), bytes.begin() + static_cast<long>(i + 2 + length)};
    }
  FAIL("no SOS marker");
  return {};
}

// Entropy-coded bytes from 60% to 70% of the file overwritten with stuffed 0xFF bytes (FF 00):
// runs of one bits longer than any Huffman code, damage in the lower rows that libjpeg meets as
// "Corrupt JPEG data: bad Huffman code" (and more after it), and no new marker.
std::vector<std::uint8_t> damaged_rows(std::vector<std::uint8_t> bytes) {
  const std::size_t first = bytes.size() * 6 / 10, last = bytes.size() * 7 / 10;
  for (std::size_t i = first; i + 1 < last; i += 2) {
    bytes[i] = 0xFF;
    bytes[i + 1] = 0x00;
  }
  return bytes;
}

// Whether decoding `r` of the file is refused (at open or at decode), and the message.
std::string verdict(const std::vector<std::uint8_t>& bytes, const jpeg_region& r) {
  jpeg_decoder dec;
  try {
    dec.open(bytes.data(), bytes.size(), 1 << 30);
    dec.decode(r);
    return "decoded";
  } catch (const bad_image& e) {
    return std::string("refused: ") + e.what();
  }
}

}  // namespace

TEST_CASE("libjpeg warnings never refuse a file (as torchvision and PIL), whatever the crop") {
  const auto clean = read_bytes(fixture("color420.jpg"));
  jpeg_decoder ref;
  const jpeg_info info = ref.open(clean.data(), clean.size(), 1 << 30);
  const jpeg_region whole{1, 0, info.width, 0, info.height}, top{1, 8, 40, 0, 16}, bottom{1, 0, info.width, 40, info.height};
  const auto want = region_bytes(ref, whole);
  ref.open(clean.data(), clean.size(), 1 << 30);
  const auto want_top = region_bytes(ref, top);
  // "Corrupt JPEG data: 2 extraneous bytes before marker 0xd9": common, and harmless.
  const auto extraneous = before_end(clean, {0x00, 0x00});
  for (const jpeg_region& r : {whole, top, bottom}) CHECK(verdict(extraneous, r) == "decoded");
  jpeg_decoder dec;
  dec.open(extraneous.data(), extraneous.size(), 1 << 30);
  CHECK(region_bytes(dec, whole) == want);
  // Damaged entropy-coded data: made-up pixels below, as torchvision and PIL give them.
  const auto damaged = damaged_rows(clean);
  for (const jpeg_region& r : {whole, top, bottom}) CHECK(verdict(damaged, r) == "decoded");
  dec.open(damaged.data(), damaged.size(), 1 << 30);
  CHECK(region_bytes(dec, top) == want_top);
}

TEST_CASE("a file libjpeg refuses past its image data is refused whatever the crop, before decoding") {
  const auto clean = read_bytes(fixture("color420.jpg"));
  jpeg_decoder ref;
  const jpeg_info info = ref.open(clean.data(), clean.size(), 1 << 30);
  const jpeg_region whole{1, 0, info.width, 0, info.height}, top{1, 8, 40, 0, 16};
  // A second scan in a single-scan file (libjpeg: "Didn't expect more than one scan"), and a
  // second frame header ("two SOF markers"): torchvision and PIL refuse both.
  std::vector<std::uint8_t> scan = sos_segment(clean);
  scan.insert(scan.end(), 16, 0x00);
  std::vector<std::uint8_t> frame;
  for (std::size_t i = 2; i + 4 < clean.size() && frame.empty(); ++i)
    if (clean[i] == 0xFF && clean[i + 1] == 0xC0)
      frame.assign(clean.begin() + static_cast<long>(i),
                   clean.begin() + static_cast<long>(i + 2 + (clean[i + 2] << 8 | clean[i + 3])));
  REQUIRE_FALSE(frame.empty());
  const std::vector<std::uint8_t> soi{0xFF, 0xD8}, unknown{0xFF, 0x55, 0x00, 0x04, 'a', 'b'};
  for (const auto& extra : {scan, frame, soi, unknown}) {
    const auto bytes = before_end(clean, extra);
    const std::string on_whole = verdict(bytes, whole), on_top = verdict(bytes, top);
    CHECK_THAT(on_whole, Catch::StartsWith("refused: "));
    CHECK(on_top == on_whole);
    jpeg_decoder dec;
    CHECK_THROWS_AS(dec.open(bytes.data(), bytes.size(), 1 << 30), bad_image);
  }
  // An APPn or COM segment there is fine, as it is for libjpeg.
  const std::vector<std::uint8_t> app{0xFF, 0xE5, 0x00, 0x04, 'a', 'b'}, com{0xFF, 0xFE, 0x00, 0x04, 'a', 'b'};
  for (const auto& extra : {app, com}) {
    const auto bytes = before_end(clean, extra);
    CHECK(verdict(bytes, whole) == "decoded");
    CHECK(verdict(bytes, top) == "decoded");
  }
}

TEST_CASE("DCT scaling is chosen only while the scaled crop keeps the output resolution") {
  CHECK(dct_scale(train_plan({0, 0, 448, 448}, 224, false)) == 2);
  CHECK(dct_scale(train_plan({0, 0, 447, 900}, 224, false)) == 1);
  CHECK(dct_scale(train_plan({0, 0, 1800, 1800}, 224, false)) == 8);
  CHECK(dct_scale(train_plan({0, 0, 900, 1000}, 224, false)) == 4);
  // eval: Resize(256) of a 375 x 500 image is a 1.46x reduction: full resolution.
  CHECK(dct_scale(eval_plan(375, 500, 224)) == 1);
  CHECK(dct_scale(eval_plan(1125, 1500, 224)) == 4);
}

TEST_CASE("eval: Resize(round(S * 256 / 224)) + CenterCrop(S) as torchvision computes them") {
  CHECK(eval_resize_size(224) == 256);
  CHECK(eval_resize_size(32) == 37);
  const resize_plan p = eval_plan(375, 500, 224);
  CHECK(p.y.out_total == 256);
  CHECK(p.x.out_total == 341);  // int(256 * 500 / 375)
  CHECK(p.y.out_first == 16);
  CHECK(p.x.out_first == 58);  // round(117 / 2) = 58, halves to even
}

namespace {

// Two-sample Kolmogorov-Smirnov statistic.
double ks_statistic(std::vector<double> a, std::vector<double> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::size_t i = 0, j = 0;
  double d = 0;
  while (i < a.size() && j < b.size()) {
    const double v = std::min(a[i], b[j]);
    while (i < a.size() && a[i] <= v) ++i;
    while (j < b.size() && b[j] <= v) ++j;
    d = std::max(d, std::abs(static_cast<double>(i) / a.size() - static_cast<double>(j) / b.size()));
  }
  return d;
}

// Rejects equal distributions with probability at most 0.001 (c(alpha) = 1.95).
double ks_critical(std::size_t n, std::size_t m) { return 1.95 * std::sqrt(static_cast<double>(n + m) / (n * m)); }

struct draws {
  std::vector<double> area, log_ratio;
};

draws ours(int h, int w, int n, const crop_scale& s) {
  draws d;
  for (int i = 0; i < n; ++i) {
    sample_rng rng(42, 0, i);
    const crop_box b = random_resized_crop(h, w, rng, s);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.top + b.height <= h);
    REQUIRE(b.left + b.width <= w);
    d.area.push_back(static_cast<double>(b.height) * b.width / (static_cast<double>(h) * w));
    d.log_ratio.push_back(std::log(static_cast<double>(b.width) / b.height));
  }
  return d;
}

}  // namespace

TEST_CASE("RandomResizedCrop's area and log-ratio follow torchvision's over 10,000 draws (KS, fixed seed)") {
  const auto fix = tbtest::read_json(tbtest::source_dir() / "tests/fixtures/rrc_draws.json");
  for (const auto& img : fix["images"]) {
    const int h = img["height"], w = img["width"];
    INFO(h << " x " << w);
    const auto ch = img["crop_h"].get<std::vector<int>>(), cw = img["crop_w"].get<std::vector<int>>();
    draws theirs;
    for (std::size_t i = 0; i < ch.size(); ++i) {
      theirs.area.push_back(static_cast<double>(ch[i]) * cw[i] / (static_cast<double>(h) * w));
      theirs.log_ratio.push_back(std::log(static_cast<double>(cw[i]) / ch[i]));
    }
    const draws mine = ours(h, w, 10000, {});
    const double critical = ks_critical(mine.area.size(), theirs.area.size());
    CHECK(ks_statistic(mine.area, theirs.area) < critical);
    CHECK(ks_statistic(mine.log_ratio, theirs.log_ratio) < critical);
    // The test has power: a sampler with another area range is rejected.
    crop_scale wrong;
    wrong.area_lo = 0.2;
    const draws off = ours(h, w, 10000, wrong);
    CHECK(ks_statistic(off.area, theirs.area) > critical);
  }
}

TEST_CASE("crop RNG: a function of seed, epoch and sample only") {
  sample_rng a(7, 3, 1234), b(7, 3, 1234), c(7, 4, 1234), d(8, 3, 1234);
  const crop_box x = random_resized_crop(375, 500, a), y = random_resized_crop(375, 500, b);
  CHECK((x.top == y.top && x.left == y.left && x.height == y.height && x.width == y.width));
  std::uint64_t na = sample_rng(7, 3, 1234).next();
  CHECK(na != c.next());
  CHECK(na != d.next());
  // Fallback: no ratio in [3/4, 4/3] fits a 10 x 200 strip, so the centre crop clamps the ratio.
  sample_rng r(1, 0, 0);
  const crop_box f = random_resized_crop(10, 200, r);
  CHECK(f.height == 10);
  CHECK(f.width == 13);  // round(10 * 4/3)
  CHECK(f.left == (200 - 13) / 2);
}

TEST_CASE("encode, then decode: sizes, channels and pixels survive (quality 95)") {
  std::vector<std::uint8_t> pixels(40 * 30 * 3);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i / 3) % 40 * 6);
  jpeg_encode_options o;
  o.quality = 95;
  const auto bytes = encode_jpeg(pixels.data(), 40, 30, 3, o);
  jpeg_decoder dec;
  const jpeg_info info = dec.open(bytes.data(), bytes.size(), 1 << 30);
  CHECK(info.width == 40);
  CHECK(info.height == 30);
  const decoded_pixels px = dec.decode({1, 0, 40, 0, 30});
  double worst = 0;
  for (int y = 0; y < 30; ++y)
    for (int x = 0; x < 40; ++x)
      for (int c = 0; c < 3; ++c)
        worst = std::max(worst,
                         std::abs(double(px.data[y * px.stride + x * px.channels + c]) - pixels[(y * 40 + x) * 3 + c]));
  CHECK(worst < 12);
}
