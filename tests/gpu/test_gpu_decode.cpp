// nvJPEG (data.decode: device) on a GPU host. Tagged [gpu]: CPU hosts skip them.
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cuda_transfer.hpp"
#include "trainbench/data/loader.hpp"

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
  tbtest::write_text(dir / "p.yaml",
                     "name: nvjpeg\ndevice: cuda\nmodel: {num_classes: 2}\n"
                     "data: {source: imagefolder, path: '" +
                         decode_data().string() +
                         "', decode: device, workers: 2}\ntrain: {batch_size: 8}\n"
                         "measure: {warmup_batches: 2, measured_batches: 3, repeats: 3}\n");
  const auto r = tbtest::run_cli("bench-data --strict --config '" + (dir / "p.yaml").string() + "' --out '" +
                                 (dir / "r.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "r.json");
  CHECK(j["effective"]["decode"] == "device");
  CHECK(j["effective"]["transfer"].get<std::string>().find("nvJPEG") != std::string::npos);
  CHECK(j["results"]["samples_per_s"]["median"].get<double>() > 0);
}
