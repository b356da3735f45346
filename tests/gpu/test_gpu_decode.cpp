// nvJPEG (data.decode: device) on a GPU host. Tagged [gpu]: CPU hosts skip them.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <catch2/catch.hpp>

#include "gpu/gpu_profiles.hpp"
#include "helpers.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cuda_transfer.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/loader.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

const fs::path& decode_data() {
  static const fs::path data = [] {
    const auto dir = tbtest::scratch("gpu-decode-data");
    const auto r = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() +
                                   "' --classes 2 --per-class 16 --seed 4");
    REQUIRE(r.code == 0);
    return dir / "ds";
  }();
  return data;
}

loader_options options(bool encoded) {
  loader_options o;
  o.batch_size = 8;
  o.workers = 1;
  o.image_size = 64;
  o.seed = 9;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  o.encoded = encoded;
  o.folder.partial_decode = false;  // compare decoders, not DCT scaling
  return o;
}

}  // namespace

TEST_CASE("nvJPEG decode + device crop gives the host path's batches within IDCT tolerance", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto ds = read_image_folder(decode_data(), "train");
  const c10::Device device(c10::kCUDA, 0);
  nvjpeg_options no;
  no.image_size = 64;
  no.mean = {0.485, 0.456, 0.406};
  no.std = {0.229, 0.224, 0.225};
  std::string why;
  auto decoder = make_nvjpeg_transfer(device, no, why);
  INFO(why);
  REQUIRE(decoder);
  batch_loader host(ds, options(false)), files(ds, options(true));
  for (int b = 0; b < 4; ++b) {
    const host_batch& h = host.next();
    const at::Tensor expected = h.images.clone();
    host.release(h);
    decoder->submit(files.next(), files);
    const device_batch d = decoder->take();
    const at::Tensor got = d.images.cpu();
    decoder->step_done();
    // One grey level is 1 / (255 * 0.229) = 0.017 after normalisation.
    const double mean_abs = (got - expected).abs().mean().item<double>();
    const double max_abs = (got - expected).abs().max().item<double>();
    INFO("batch " << b << ": mean " << mean_abs << ", max " << max_abs);
    CHECK(mean_abs < 0.02);
    CHECK(max_abs < 0.3);
  }
}

// The CUDA clock records the h2d events on the stream a copy_lane names: with a side stream that
// must be the stream the decode and its copies are enqueued on, not the compute stream.
TEST_CASE("nvJPEG names its side stream to the clock, and no stream without copy_stream", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  for (bool side : {false, true}) {
    INFO((side ? "copy_stream" : "no copy_stream"));
    nvjpeg_options no;
    no.image_size = 64;
    no.mean = {0.485, 0.456, 0.406};
    no.std = {0.229, 0.224, 0.225};
    no.copy_stream = side;
    std::string why;
    auto decoder = make_nvjpeg_transfer(device, no, why);
    INFO(why);
    REQUIRE(decoder);
    const auto* lane = dynamic_cast<const copy_lane*>(decoder.get());
    REQUIRE(lane);
    const auto stream = lane->stream();
    CHECK(stream.has_value() == side);
    if (stream) CHECK(*stream != c10::cuda::getCurrentCUDAStream(device.index()));
  }
}

TEST_CASE("bench-data reports decode throughput on the GPU with data.decode: device", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto dir = tbtest::scratch("gpu-decode-bench");
  tbtest::write_text(dir / "p.yaml", tbgpu::decode_bench_profile(decode_data().string()));
  const auto r = tbtest::run_cli("bench-data --strict --config '" + (dir / "p.yaml").string() + "' --out '" +
                                 (dir / "r.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "r.json");
  CHECK(j["effective"]["decode"] == "device");
  CHECK(j["effective"]["transfer"].get<std::string>().find("nvJPEG") != std::string::npos);
  CHECK(j["results"]["samples_per_s"]["median"].get<double>() > 0);
  // Every image of every window decoded on the device (3 batches of 8 each, no lookahead).
  const auto& dd = j["results"]["device_decode"];
  REQUIRE(dd.is_object());
  REQUIRE(dd["windows"].size() == 3);
  for (const auto& w : dd["windows"]) {
    CHECK(w["images_device"] == 24);
    CHECK(w["host_fallbacks"] == 0);
  }
  CHECK(dd["images_device"].get<std::int64_t>() >= 3 * 24);
  CHECK(dd["peak_bytes_held"].get<std::int64_t>() > 0);
}

namespace {

std::vector<std::uint8_t> pattern(int w, int h, int seed) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[(static_cast<std::size_t>(y) * w + x) * 3 + c] =
            static_cast<std::uint8_t>((x * (3 + seed) + y * 5 + c * 60 + seed * 17) & 0xFF);
  return px;
}

void write_bytes(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(file.parent_path());
  std::FILE* f = std::fopen(file.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

// Eight files in two classes; `arith` of them arithmetic-coded, the last one cut short if `broken`.
fs::path mixed_folder(const std::string& name, int arith, bool broken) {
  const auto root = tbtest::scratch(name);
  for (int i = 0; i < 8; ++i) {
    const int w = 80 + 8 * i, h = 72 + 4 * i;
    const auto px = pattern(w, h, i);
    std::vector<std::uint8_t> bytes =
        i < arith ? tbtest::encode_arithmetic_jpeg(px.data(), w, h) : encode_jpeg(px.data(), w, h, 3, {});
    if (broken && i == 0) bytes.resize(bytes.size() * 2 / 3);  // header intact, scan data cut
    write_bytes(root / "train" / (i % 2 ? "b" : "a") / ("img" + std::to_string(i) + ".jpg"), bytes);
  }
  return root;
}

nvjpeg_options small_options() {
  nvjpeg_options no;
  no.image_size = 64;
  no.mean = {0.485, 0.456, 0.406};
  no.std = {0.229, 0.224, 0.225};
  return no;
}

}  // namespace

// nvJPEG decodes Huffman-coded files only: an arithmetic-coded one passes the host's header check
// and must be decoded on the host, counted, and give the host path's pixels.
TEST_CASE("nvJPEG hands arithmetic-coded files to libjpeg-turbo, counts them, and matches the host path", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto ds = read_image_folder(mixed_folder("gpu-decode-arith", 3, false), "train");
  const c10::Device device(c10::kCUDA, 0);
  for (bool side : {false, true}) {
    INFO((side ? "copy_stream" : "no copy_stream"));
    nvjpeg_options no = small_options();
    no.copy_stream = side;
    std::string why;
    auto decoder = make_nvjpeg_transfer(device, no, why);
    INFO(why);
    REQUIRE(decoder);
    batch_loader host(ds, options(false)), files(ds, options(true));
    const host_batch& h = host.next();
    const at::Tensor expected = h.images.clone();
    host.release(h);
    decoder->submit(files.next(), files);
    const device_batch d = decoder->take();
    const at::Tensor got = d.images.cpu();
    decoder->step_done();
    const device_decode_counts* counts = decoder->decode_counts();
    REQUIRE(counts);
    CHECK(counts->host_fallbacks == 3);
    CHECK(counts->images_device == 5);
    CHECK(counts->replaced_samples == 0);
    CHECK(counts->bytes_held > 0);
    CHECK(counts->peak_bytes_held >= counts->bytes_held);
    CHECK((got - expected).abs().mean().item<double>() < 0.02);
    CHECK((got - expected).abs().max().item<double>() < 0.3);
  }
}

// A file neither decoder can read is a bad file: data.on_bad_file: skip replaces it within its
// batch and counts it; without skip the error names the file.
TEST_CASE("a file nvJPEG and libjpeg-turbo both refuse is skipped with on_bad_file: skip, else named", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto root = mixed_folder("gpu-decode-broken", 1, true);
  const auto ds = read_image_folder(root, "train");
  const c10::Device device(c10::kCUDA, 0);
  for (bool skip : {true, false}) {
    INFO((skip ? "skip" : "error"));
    nvjpeg_options no = small_options();
    no.skip_bad_files = skip;
    std::string why;
    auto decoder = make_nvjpeg_transfer(device, no, why);
    REQUIRE(decoder);
    batch_loader files(ds, options(true));
    if (!skip) {
      try {
        decoder->submit(files.next(), files);
        FAIL("a file no decoder can read was accepted");
      } catch (const input_error& e) {
        CHECK(std::string(e.what()).find("img0.jpg") != std::string::npos);
      }
      continue;
    }
    decoder->submit(files.next(), files);
    const device_batch d = decoder->take();
    CHECK(d.images.isfinite().all().item<bool>());
    decoder->step_done();
    CHECK(decoder->decode_counts()->replaced_samples == 1);
    CHECK(decoder->decode_counts()->images_device == 7);
  }
}
