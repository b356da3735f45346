#include <ATen/ATen.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "trainbench/data/transform.hpp"
#include "trainbench/stages/preprocess.hpp"

using namespace trainbench;

TEST_CASE("resize + normalize matches torchvision's fixture values") {
  const auto fixture = tbtest::read_json(tbtest::source_dir() / "tests/fixtures/resize_normalize.json");
  for (const auto& c : fixture["cases"]) {
    const int h = c["h"], w = c["w"], ch = c["c"], out = c["out"];
    INFO(h << "x" << w << "x" << ch << " -> " << out);
    const auto input = c["input"].get<std::vector<int>>();
    std::vector<std::uint8_t> pixels(input.begin(), input.end());
    const auto expected = c["expected_nchw"].get<std::vector<double>>();
    const auto mean = c["mean"].get<std::vector<double>>(), sd = c["std"].get<std::vector<double>>();
    image_transform nchw(h, w, ch, out, mean, sd, false);
    std::vector<float> got(static_cast<std::size_t>(nchw.output_floats())), scratch;
    nchw.apply(pixels.data(), got.data(), scratch);
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-4));

    image_transform nhwc(h, w, ch, out, mean, sd, true);
    std::vector<float> last(got.size());
    nhwc.apply(pixels.data(), last.data(), scratch);
    const std::size_t plane = static_cast<std::size_t>(out) * out;
    for (std::size_t p = 0; p < plane; ++p)
      for (std::size_t k = 0; k < 3; ++k) CHECK(last[p * 3 + k] == Approx(expected[k * plane + p]).margin(1e-4));
  }
}

TEST_CASE("device-side preprocessing gives the host path's tensors") {
  const std::vector<double> mean{0.5, 0.4, 0.3}, std{0.2, 0.25, 0.3};
  for (int channels : {3, 1}) {
    for (int size : {7, 24, 5}) {
      INFO(channels << " channels to " << size);
      at::manual_seed(3);
      const at::Tensor raw = at::randint(0, 256, {2, 12, 12, channels}, at::kByte);
      device_preprocess dev(size, mean, std, false, at::kCPU);
      const at::Tensor got = dev(raw);
      image_transform host(12, 12, channels, size, mean, std, false);
      std::vector<float> expected(static_cast<std::size_t>(2 * host.output_floats())), scratch;
      for (int i = 0; i < 2; ++i)
        host.apply(raw[i].contiguous().data_ptr<std::uint8_t>(), expected.data() + i * host.output_floats(), scratch);
      const at::Tensor want = at::from_blob(expected.data(), {2, 3, size, size}, at::kFloat);
      CHECK(at::allclose(got, want, 1e-4, 1e-4));
    }
  }
}

TEST_CASE("shrinking by any factor keeps every tap: a constant image stays constant") {
  // The filter spans about 2 x scale source pixels; 128 -> 8 needs 33 taps, 1000 -> 7 about 287.
  const std::vector<double> mean{0, 0, 0}, sd{1, 1, 1};
  const int cases[][3] = {{128, 128, 8}, {256, 256, 8}, {1000, 1000, 7}, {1000, 40, 9}, {33, 600, 8}};
  for (const auto& c : cases) {
    const int h = c[0], w = c[1], out = c[2];
    for (int channels : {3, 1}) {
      for (bool channels_last : {false, true}) {
        INFO(h << "x" << w << "x" << channels << " -> " << out << (channels_last ? " NHWC" : " NCHW"));
        std::vector<std::uint8_t> white(static_cast<std::size_t>(h) * w * channels, 255);
        image_transform t(h, w, channels, out, mean, sd, channels_last);
        std::vector<float> got(static_cast<std::size_t>(t.output_floats())), scratch;
        t.apply(white.data(), got.data(), scratch);
        float lo = 2, hi = -1;
        for (float v : got) lo = std::min(lo, v), hi = std::max(hi, v);
        CHECK(lo == Approx(1.0).margin(1e-5));
        CHECK(hi == Approx(1.0).margin(1e-5));
      }
    }
  }
}

TEST_CASE("large shrink factors match the antialiased resize torchvision calls on tensors") {
  // torchvision's Resize(antialias=True) on a float tensor is aten::_upsample_bilinear2d_aa.
  const std::vector<double> mean{0, 0, 0}, sd{1, 1, 1};
  const int cases[][3] = {{128, 128, 8}, {256, 256, 8}, {1000, 1000, 7}, {300, 90, 10}};
  for (const auto& c : cases) {
    const int h = c[0], w = c[1], out = c[2];
    INFO(h << "x" << w << " -> " << out);
    at::manual_seed(7);
    const at::Tensor raw = at::randint(0, 256, {h, w, 3}, at::kByte);
    image_transform t(h, w, 3, out, mean, sd, false);
    std::vector<float> got(static_cast<std::size_t>(t.output_floats())), scratch;
    t.apply(raw.data_ptr<std::uint8_t>(), got.data(), scratch);
    const at::Tensor x = raw.permute({2, 0, 1}).unsqueeze(0).to(at::kFloat) / 255.0;
    const at::Tensor want = at::_upsample_bilinear2d_aa(x, {out, out}, false).squeeze(0);
    const at::Tensor have = at::from_blob(got.data(), {3, out, out}, at::kFloat);
    CHECK(at::allclose(have, want, 1e-4, 1e-4));
  }
}
