// nvJPEG (data.decode: device) on a GPU host. Tagged [gpu]: CPU hosts skip them.
#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>
#include <utility>

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

// The decode options of most cases: 64 px, ImageNet's mean and std.
nvjpeg_options small_options() {
  nvjpeg_options no;
  no.image_size = 64;
  no.mean = {0.485, 0.456, 0.406};
  no.std = {0.229, 0.224, 0.225};
  return no;
}

// The nvJPEG stage for these options on device; the case stops, with nvJPEG's reason, where none
// can be made.
std::unique_ptr<transfer_stage> nvjpeg_decoder(c10::Device device, const nvjpeg_options& o) {
  std::string why;
  auto decoder = make_nvjpeg_transfer(device, o, why);
  INFO(why);
  REQUIRE(decoder);
  return decoder;
}

// The next batch of both paths: the host loader's, and the decoder's from the files' loader,
// taken, brought to the host as float, and its step marked done.
struct batch_pair {
  at::Tensor expected, got;
  at::ScalarType dtype = at::kFloat;  // the decoder's batch as it came
};
batch_pair next_pair(batch_loader& host, batch_loader& files, transfer_stage& decoder) {
  batch_pair p;
  const host_batch& h = host.next();
  p.expected = h.images.clone();
  host.release(h);
  decoder.submit(files.next(), files);
  const device_batch d = decoder.take();
  p.dtype = d.images.scalar_type();
  p.got = d.images.cpu().to(at::kFloat);
  decoder.step_done();
  return p;
}

}  // namespace

TEST_CASE("nvJPEG decode + device crop gives the host path's batches within IDCT tolerance", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto ds = read_image_folder(decode_data(), "train");
  const c10::Device device(c10::kCUDA, 0);
  nvjpeg_options no = small_options();
  no.channels_last = GENERATE(false, true);  // the fused kernel writes NCHW or NHWC
  no.copy_stream = GENERATE(false, true);    // on the compute stream or a side stream
  no.dtype = GENERATE(at::kFloat, at::kHalf);  // float, or fp16 written directly for autocast
  // The fused kernel, or the per-image ATen ops (crop_by_taps) that stand in where its check fails.
  no.fused_crop_for_tests = GENERATE(true, false);
  INFO("channels_last " << no.channels_last << ", copy_stream " << no.copy_stream << ", dtype " << no.dtype
                        << ", fused kernel " << no.fused_crop_for_tests);
  auto decoder = nvjpeg_decoder(device, no);
  // The fused crop kernel passed its check against the host path's values at construction.
  CHECK_THAT(decoder->describe(),
             Catch::Contains(no.fused_crop_for_tests ? "in one fused kernel per batch" : "by ATen ops per image"));
  CHECK_THAT(decoder->describe(), Catch::Contains(no.dtype == at::kHalf ? "into float16" : "into float32"));
  batch_loader host(ds, options(false)), files(ds, options(true));
  for (int b = 0; b < 4; ++b) {
    const auto [expected, got, dtype] = next_pair(host, files, *decoder);
    CHECK(dtype == no.dtype);
    // One grey level is 1 / (255 * 0.229) = 0.017 after normalisation (fp16 rounds |x| <= 2.7 to
    // within 0.001).
    const double mean_abs = (got - expected).abs().mean().item<double>();
    const double max_abs = (got - expected).abs().max().item<double>();
    INFO("batch " << b << ": mean " << mean_abs << ", max " << max_abs);
    CHECK(mean_abs < 0.02);
    CHECK(max_abs < 0.3);
  }
}

// nvJPEG's handles interpolate chroma (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION) as the host
// path's libjpeg-turbo does; the dataset's colour files are 4:2:0, so every colour edge shows the
// difference from nvJPEG's default (each chroma sample repeated). The switch must change what runs,
// and towards the host path's pixels.
TEST_CASE("nvJPEG's interpolated chroma is nearer the host path's pixels than repeated chroma", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto ds = read_image_folder(decode_data(), "train");
  const c10::Device device(c10::kCUDA, 0);
  double mean_abs[2] = {0, 0};
  for (const bool interpolated : {true, false}) {
    nvjpeg_options no = small_options();
    no.interpolated_chroma = interpolated;
    auto decoder = nvjpeg_decoder(device, no);
    INFO(decoder->describe());
    CHECK_THAT(decoder->describe(), Catch::Contains(interpolated ? "chroma interpolated" : "chroma repeated"));
    batch_loader host(ds, options(false)), files(ds, options(true));
    for (int b = 0; b < 4; ++b) {
      const batch_pair p = next_pair(host, files, *decoder);
      mean_abs[interpolated ? 0 : 1] += (p.got - p.expected).abs().mean().item<double>() / 4;
    }
  }
  WARN("mean |device - host| over 4 batches: " << mean_abs[0] << " with interpolated chroma, " << mean_abs[1]
                                               << " with repeated chroma");
  CHECK(mean_abs[0] < mean_abs[1]);
  CHECK(mean_abs[0] < 0.02);
}

// The pinned file ring under pressure: a ring of about two batches, refilled while the device lags
// (each "step" spins on the compute stream, which the side stream waits for), so the workers must
// run the `read` fences to get room, over more batches than the stage has `read` events (16, used
// round). A fence that let a worker refill bytes nvJPEG had not read yet would corrupt the files
// of later batches, and engines that wrote a pixel arena before the crops that last read it (two
// batches before) had run would mix two batches: every batch must still be the host path's within
// IDCT tolerance.
TEST_CASE("nvJPEG with a small pinned file ring and a lagging device: every batch is the host path's", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto ds = read_image_folder(decode_data(), "train");
  const c10::Device device(c10::kCUDA, 0);
  nvjpeg_options no = small_options();
  // On a side stream, or on the compute stream behind the lagging steps: either way the engines
  // must not write an arena before the crops that last read it have run.
  no.copy_stream = GENERATE(true, false);
  INFO("copy_stream " << no.copy_stream);
  auto decoder = nvjpeg_decoder(device, no);
  loader_options fo = options(true);
  fo.pin_memory = true;
  std::uintmax_t total = 0;
  for (const auto& f : fs::recursive_directory_iterator(decode_data()))
    if (f.is_regular_file() && f.path().extension() == ".jpg") total += f.file_size();
  fo.file_ring_bytes = static_cast<std::size_t>(total / 2);  // about two batches of the four an epoch holds
  batch_loader host(ds, options(false)), files(ds, fo);
  REQUIRE(files.file_ring_pinned());
  const int batches = 40;  // more than the stage's 16 `read` events
  std::vector<at::Tensor> got;  // kept on the device: the host never waits, so the device lags behind it
  decoder->submit(files.next(), files);
  for (int b = 0; b < batches; ++b) {
    const device_batch d = decoder->take();
    at::cuda::sleep(std::int64_t{20} << 20);  // the "step": milliseconds of spinning on the compute stream
    got.push_back(d.images.clone());
    decoder->step_done();
    if (b + 1 < batches) decoder->submit(files.next(), files);
  }
  c10::cuda::device_synchronize();
  for (int b = 0; b < batches; ++b) {
    const host_batch& h = host.next();
    const at::Tensor diff = (got[static_cast<std::size_t>(b)].cpu() - h.images).abs();
    host.release(h);
    INFO("batch " << b << ": mean " << diff.mean().item<double>() << ", max " << diff.max().item<double>());
    CHECK(diff.mean().item<double>() < 0.02);
    CHECK(diff.max().item<double>() < 0.3);
  }
  const device_decode_counts* c = decoder->decode_counts();
  CHECK(c->pageable_batches < batches / 2);  // most went through the ring
  // A wait is counted only where the host found the device behind, so it takes time: host_wait_s.
  INFO(c->arena_waits << " arena waits, " << c->state_waits << " state waits, " << c->wait_ns << " ns");
  if (c->arena_waits + c->state_waits > 0) CHECK(c->wait_ns > 0);
}

// The CUDA clock records the h2d events on the stream a copy_lane names: with a side stream that
// must be the stream the decode and its copies are enqueued on, not the compute stream.
TEST_CASE("nvJPEG names its side stream to the clock, and no stream without copy_stream", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  for (bool side : {false, true}) {
    INFO((side ? "copy_stream" : "no copy_stream"));
    nvjpeg_options no = small_options();
    no.copy_stream = side;
    auto decoder = nvjpeg_decoder(device, no);
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
  // Every image of every window decoded on the device, or, for the progressive tenth of the files,
  // by the loader's workers (3 batches of 8 each, no lookahead).
  const auto& dd = j["results"]["device_decode"];
  REQUIRE(dd.is_object());
  REQUIRE(dd["windows"].size() == 3);
  for (const auto& w : dd["windows"]) {
    CHECK(w["images_device"].get<std::int64_t>() + w["images_workers"].get<std::int64_t>() == 24);
    CHECK(w["images_hardware"].get<std::int64_t>() + w["images_cuda"].get<std::int64_t>() == w["images_device"]);
    CHECK(w["host_fallbacks"] == 0);
    CHECK(w["pageable_batches"] == 3);  // data.pin_memory is off: no file ring
  }
  CHECK(dd["images_device"].get<std::int64_t>() + dd["images_workers"].get<std::int64_t>() >= 3 * 24);
  CHECK(dd["images_workers"].get<std::int64_t>() > 0);  // whole epochs of the 32 files, a tenth of them progressive
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
    auto decoder = nvjpeg_decoder(device, no);
    batch_loader host(ds, options(false)), files(ds, options(true));
    const batch_pair p = next_pair(host, files, *decoder);
    const device_decode_counts* counts = decoder->decode_counts();
    REQUIRE(counts);
    CHECK(counts->host_fallbacks == 3);
    CHECK(counts->images_device == 5);
    CHECK(counts->images_hardware + counts->images_cuda == 5);
    CHECK(counts->replaced_samples == 0);
    CHECK(counts->bytes_held > 0);
    CHECK(counts->peak_bytes_held >= counts->bytes_held);
    CHECK((p.got - p.expected).abs().mean().item<double>() < 0.02);
    CHECK((p.got - p.expected).abs().max().item<double>() < 0.3);
  }
}

// A file cut short has no end-of-image marker: the workers' marker walk finds it before nvJPEG
// sees it, so it is a bad file of the loader (replaced there with data.on_bad_file: skip, and
// counted by the loader, not the decoder); without skip the error names the file. (This test
// expected the decoder to replace it: the workers' check has always refused such a file first.)
TEST_CASE("a file cut short is skipped by the loader with on_bad_file: skip, else named", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const auto root = mixed_folder("gpu-decode-broken", 1, true);
  const auto ds = read_image_folder(root, "train");
  const c10::Device device(c10::kCUDA, 0);
  for (bool skip : {true, false}) {
    INFO((skip ? "skip" : "error"));
    nvjpeg_options no = small_options();
    no.skip_bad_files = skip;
    auto decoder = nvjpeg_decoder(device, no);
    loader_options lo = options(true);
    lo.folder.skip_bad_files = skip;
    batch_loader files(ds, lo);
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
    CHECK(decoder->decode_counts()->replaced_samples == 0);
    CHECK(files.replaced_samples() == 1);
    CHECK(decoder->decode_counts()->images_device == 8);  // img0 (arithmetic-coded and cut) is replaced by a good file
  }
}

namespace {

std::vector<std::uint8_t> fixture_bytes(const std::string& name) {
  std::ifstream in(tbtest::source_dir() / "tests/fixtures/jpeg" / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A Motion Photo: the image, then a video whose bytes hold a JPEG-like FF D8 ... FF D9.
std::vector<std::uint8_t> motion_photo(std::vector<std::uint8_t> b) {
  const std::uint8_t video[] = {0, 0, 0, 24, 'f', 't', 'y', 'p', 'm', 'p', '4', '2',
                                0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xD9};
  for (int k = 0; k < 2000; ++k) b.insert(b.end(), std::begin(video), std::end(video));
  return b;
}

// Every kind of file the issue names, one class each so a batch holds them all.
fs::path kinds_folder() {
  static const fs::path root = [] {
    const auto dir = tbtest::scratch("gpu-decode-kinds");
    int k = 0;
    auto put = [&](const std::string& name, const std::vector<std::uint8_t>& bytes) {
      write_bytes(dir / "train" / ("c" + std::to_string(k++)) / name, bytes);
    };
    for (const char* f : {"color420.jpg", "color444.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg", "cmyk_k.jpg"})
      put(f, fixture_bytes(f));
    put("motion420.jpg", motion_photo(fixture_bytes("color420.jpg")));
    put("motionprog.jpg", motion_photo(fixture_bytes("progressive.jpg")));
    return dir;
  }();
  return root;
}

// The files of the batch by position, as the loader's order put them.
std::vector<std::string> names_of(const batch_loader& loader, std::int64_t batch) {
  std::vector<std::string> out;
  for (std::int64_t i : loader.batch_indices(batch)) out.push_back(loader.files()->path(i));
  return out;
}

// 16 baseline 4:2:0 photos of ImageNet's size: what the hardware engines take.
fs::path baseline_folder() {
  static const fs::path root = [] {
    const auto dir = tbtest::scratch("gpu-decode-baseline");
    for (int i = 0; i < 16; ++i) {
      const int w = 500 - 8 * i, h = 375 - 4 * i;
      const auto px = pattern(w, h, i);
      write_bytes(dir / "train" / (i % 2 ? "b" : "a") / ("img" + std::to_string(i) + ".jpg"),
                  encode_jpeg(px.data(), w, h, 3, {}));
    }
    return dir;
  }();
  return root;
}

}  // namespace

namespace {

// One batch of a folder through the host path and through the device decoder (the file ring
// pinned or not; the engines' misses decoded by the workers or not; a share of the positions for
// the workers; DCT-scaled partial decoding on both paths or neither), by position.
struct kinds_batch {
  std::vector<std::string> names;
  at::Tensor expected, got;
  std::vector<bool> on_workers;     // decoded by a loader worker
  std::vector<plan_region> regions;  // a worker's region, in the pixels it decoded
  std::vector<jpeg_info> infos;      // each file's
};
kinds_batch decode_batch(transfer_stage& decoder, const fs::path& root, bool pinned, bool off_engines, double share,
                         bool partial_decode) {
  const auto ds = read_image_folder(root, "train");
  loader_options ho = options(false), fo = options(true);
  ho.folder.partial_decode = fo.folder.partial_decode = partial_decode;
  fo.pin_memory = pinned;
  fo.folder.decode_off_engines = off_engines;
  fo.folder.device_share = share;
  if (pinned) fo.file_ring_bytes = batch_loader::file_ring_size(fo);
  batch_loader host(ds, ho), files(ds, fo);
  REQUIRE(files.file_ring_pinned() == pinned);
  kinds_batch out;
  out.names = names_of(files, 0);
  const host_batch& h = host.next();
  out.expected = h.images.clone();
  host.release(h);
  const host_batch& f = files.next();
  for (const plan_region& r : f.encoded->decoded) out.on_workers.push_back(r.width > 0);
  out.regions = f.encoded->decoded;
  out.infos = f.encoded->infos;
  decoder.submit(f, files);
  out.got = decoder.take().images.cpu();
  decoder.step_done();
  return out;
}

// kinds_folder() at the cases' size, whole images decoded (decoders compared, not DCT scaling).
kinds_batch decode_kinds(transfer_stage& decoder, bool pinned, bool off_engines, double share = 1.0) {
  return decode_batch(decoder, kinds_folder(), pinned, off_engines, share, false);
}

}  // namespace

// Deliverable: the same pixels as the host path, per image, for every kind of file: nvJPEG's
// IDCT and chroma upsampling differ from libjpeg-turbo's (within a few grey levels), CMYK goes to
// the host (the same conversion), and a Motion Photo decodes as its image alone.
TEST_CASE("nvJPEG gives the host path's pixels per image: baseline, progressive, gray, CMYK, Motion Photo",
          "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  for (bool pinned : {false, true}) {
    INFO((pinned ? "pinned file ring" : "pageable files"));
    auto decoder = nvjpeg_decoder(device, small_options());
    const kinds_batch b = decode_kinds(*decoder, pinned, false);
    for (std::int64_t i = 0; i < 8; ++i) {
      const at::Tensor diff = (b.got[i] - b.expected[i]).abs();
      INFO(b.names[static_cast<std::size_t>(i)] << ": mean " << diff.mean().item<double>() << ", max "
                                                << diff.max().item<double>());
      CHECK(diff.mean().item<double>() < 0.02);  // one grey level is 0.017 after normalisation
      CHECK(diff.max().item<double>() < 0.3);
    }
    const device_decode_counts* c = decoder->decode_counts();
    CHECK(c->host_fallbacks == 2);  // the two CMYK files
    CHECK(c->images_device == 6);
    CHECK(c->images_hardware + c->images_cuda == 6);
    CHECK(c->images_cuda >= 2);  // the progressive files never go to the engines
    CHECK(c->pageable_batches == (pinned ? 0 : 1));
  }
}

// data.decode_off_engines: host. The workers decode the progressive and CMYK files (their crops'
// regions, libjpeg-turbo), the device copies those pixels up and crops them with the fused
// kernel: those images must be the host path's within the kernel's float tolerance (the same
// libjpeg-turbo pixels), the rest within IDCT tolerance, and nothing goes to the general backend
// or the training thread's libjpeg-turbo. With data.device_decode_share 0.5 the workers decode
// every other position besides (offered_to_device), baseline files included, and the batch is the same.
TEST_CASE("the loader's workers decode what the JPEG engines cannot take, and the device crops it as the host path does",
          "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  for (const auto& [pinned, share] : {std::pair{false, 1.0}, std::pair{true, 1.0}, std::pair{true, 0.5}}) {
    INFO((pinned ? "pinned file ring" : "pageable files") << ", data.device_decode_share " << share);
    auto decoder = nvjpeg_decoder(device, small_options());
    const kinds_batch b = decode_kinds(*decoder, pinned, true, share);
    for (std::int64_t i = 0; i < 8; ++i) {
      const at::Tensor diff = (b.got[i] - b.expected[i]).abs();
      const bool mine = b.on_workers[static_cast<std::size_t>(i)];
      INFO(b.names[static_cast<std::size_t>(i)] << (mine ? " (decoded by a worker)" : "") << ": mean "
                                                << diff.mean().item<double>() << ", max " << diff.max().item<double>());
      CHECK(diff.max().item<double>() < (mine ? 1e-4 : 0.3));
      CHECK(diff.mean().item<double>() < 0.02);
    }
    const device_decode_counts* c = decoder->decode_counts();
    const auto workers = std::count(b.on_workers.begin(), b.on_workers.end(), true);
    CHECK(workers >= 4);  // progressive, its Motion Photo, the two CMYK files, and with the share more
    for (std::size_t i = 0; i < 8; ++i) {
      const std::string& name = b.names[i];
      const bool off_engines = name.find("prog") != std::string::npos || name.find("cmyk") != std::string::npos;
      INFO(name);
      CHECK(b.on_workers[i] == (off_engines || !offered_to_device(static_cast<std::int64_t>(i), share)));
    }
    CHECK(c->images_workers == workers);
    CHECK(c->host_fallbacks == 0);
    CHECK(c->images_device == 8 - workers);  // the baseline files: the engines, or the general backend without them
    CHECK(c->pageable_batches == (pinned ? 0 : 1));
  }
}

namespace {

// 8 baseline photos of 1600 x 1200 (give or take): at 64 px every RandomResizedCrop is at least
// twice the output on both sides, so the host path decodes each at 1/2, 1/4 or 1/8 of its size.
fs::path large_folder() {
  static const fs::path root = [] {
    const auto dir = tbtest::scratch("gpu-decode-large");
    for (int i = 0; i < 8; ++i) {
      const int w = 1600 - 16 * i, h = 1200 - 8 * i;
      const auto px = pattern(w, h, 40 + i);
      write_bytes(dir / "train" / (i % 2 ? "b" : "a") / ("big" + std::to_string(i) + ".jpg"),
                  encode_jpeg(px.data(), w, h, 3, {}));
    }
    return dir;
  }();
  return root;
}

}  // namespace

// data.device_decode_share with partial decoding on large photos: the workers decode their share
// at the host path's DCT scale (scaled_plan), ship the scaled region and plan, and the device crops
// those pixels: each such image is the host path's (the same libjpeg-turbo pixels at the same
// scale, the same taps) within the kernel's float tolerance. A worker that decoded at full size
// and let the device shrink it would be off by more; its region would not fit the scaled image.
TEST_CASE("with device_decode_share and partial decoding, the workers' large photos are the host path's, DCT-scaled",
          "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  auto decoder = nvjpeg_decoder(device, small_options());
  const kinds_batch b = decode_batch(*decoder, large_folder(), true, true, 0.5, true);
  const at::Tensor got = b.got.to(at::kFloat);
  CHECK(got.isfinite().all().item<bool>());
  std::int64_t workers = 0;
  for (std::int64_t i = 0; i < 8; ++i) {
    const auto k = static_cast<std::size_t>(i);
    CHECK(b.on_workers[k] == !offered_to_device(i, 0.5));
    if (!b.on_workers[k]) continue;
    ++workers;
    const plan_region& r = b.regions[k];
    const jpeg_info& file = b.infos[k];
    INFO("position " << i << ": region " << r.x0 << "," << r.y0 << " " << r.width << "x" << r.height << " of a "
                     << file.width << "x" << file.height << " file");
    // Decoded at 1/2 or less: the region lies within half the file's size.
    CHECK(r.x0 + r.width <= (file.width + 1) / 2);
    CHECK(r.y0 + r.height <= (file.height + 1) / 2);
    const at::Tensor diff = (got[i] - b.expected[i]).abs();
    INFO("max difference " << diff.max().item<double>());
    CHECK(diff.max().item<double>() < 1e-4);
  }
  CHECK(workers == 4);
  CHECK(decoder->decode_counts()->images_workers == 4);
}

// Deliverable: the hardware engines are used where the GPU has them (A100, H100, H200).
TEST_CASE("on A100, H100 and H200 the JPEG engines decode the baseline files", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  const std::string name = cuda_device_name(device);
  auto decoder = nvjpeg_decoder(device, small_options());
  const bool engines = name.find("A100") != std::string::npos || name.find("H100") != std::string::npos ||
                       name.find("H200") != std::string::npos;
  INFO(name << ": " << decoder->describe());
  if (engines) CHECK(decoder->describe().find("hardware JPEG engines") != std::string::npos);
  const auto ds = read_image_folder(baseline_folder(), "train");
  loader_options o = options(true);
  o.pin_memory = true;
  o.file_ring_bytes = batch_loader::file_ring_size(o);
  batch_loader files(ds, o);
  for (int b = 0; b < 2; ++b) {
    decoder->submit(files.next(), files);
    const device_batch d = decoder->take();
    CHECK(d.images.isfinite().all().item<bool>());
    decoder->step_done();
  }
  const device_decode_counts* c = decoder->decode_counts();
  CHECK(c->images_device == 16);
  CHECK(c->host_fallbacks == 0);
  if (engines) {
    CHECK(c->images_hardware == 16);
    // Whether the engines take a region is theirs to say (nvjpegDecodeBatchedSupportedEx).
    if (c->images_region < 16) WARN("the engines decoded " << c->images_region << " of 16 train crops as regions");
  } else {
    CHECK(c->images_hardware + c->images_cuda == 16);
  }
}

// Deliverable: a file the engines refuse inside a batch, though nvJPEG's own check took it, costs
// that batch a search once, not every batch that holds it every epoch. No such file is known to
// make, so file 5 is refused for the engines: with nvJPEG's status without calling it, or by
// giving the engines a stream with no frame in its place, which nvJPEG refuses itself (the state
// after a real failed call, the retries after it). The batch is split until file 5 is found, the
// engines decode the rest, the general backend (or the loader's workers) takes file 5, and the
// next epoch sends it there without asking the engines.
TEST_CASE("a file the JPEG engines refuse in a batch is found by halving, and the batches stay the host path's",
          "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  nvjpeg_options no = small_options();
  no.copy_stream = GENERATE(false, true);
  no.regions = GENERATE(false, true);
  // Refused by status with file 5 left to the general backend, or refused by nvJPEG itself with
  // file 5 moved to the loader's workers (data.decode_off_engines: host).
  const bool real_refusal = GENERATE(false, true);
  no.refuse_by_spoiling_for_tests = real_refusal;
  no.refuse_on_engines_for_tests = 5;
  const bool off_engines = real_refusal;
  INFO("copy_stream " << no.copy_stream << ", regions " << no.regions << ", spoiled bytes "
                      << no.refuse_by_spoiling_for_tests << ", decode_off_engines " << off_engines);
  auto decoder = nvjpeg_decoder(device, no);
  if (decoder->describe().find("hardware JPEG engines") == std::string::npos) {
    WARN("no JPEG engines on " << cuda_device_name(device) << ": nothing for them to refuse");
    return;
  }
  const bool regions = decoder->describe().find("each crop's region only") != std::string::npos;
  const auto ds = read_image_folder(baseline_folder(), "train");
  loader_options fo = options(true);
  fo.folder.decode_off_engines = off_engines;
  batch_loader host(ds, options(false)), files(ds, fo);
  const device_decode_counts* c = decoder->decode_counts();
  std::int64_t first_epoch_refusals = 0;
  for (int b = 0; b < 4; ++b) {  // two epochs of 16 files
    batch_pair p;
    try {
      p = next_pair(host, files, *decoder);
    } catch (const run_error& e) {
      // How the engines answer a stream with no frame is NVIDIA's, undocumented: a status that
      // is not a refusal (an execution failure) ends a run, as a device fault must. Shown for the
      // next reading; the status variant checks the halving itself.
      if (!real_refusal) throw;
      WARN("the JPEG engines answered a stream with no frame (FF D8 FF D9) with a failure, not a refusal: "
           << e.what());
      return;
    }
    const double max_abs = (p.got - p.expected).abs().max().item<double>();
    INFO("batch " << b << ": max " << max_abs);
    CHECK((p.got - p.expected).abs().mean().item<double>() < 0.02);
    CHECK(max_abs < 0.3);
    if (b == 1) first_epoch_refusals = c->hardware_refusals;
  }
  if (real_refusal && c->hardware_refusals == 0) {
    WARN("nvJPEG's engines decoded a stream with no frame (FF D8 FF D9) without an error status");
    return;
  }
  CHECK(c->hardware_refused_files == 1);
  // The whole batch of 8, at most one refused half at each of the two halvings, and file 5 alone.
  CHECK(first_epoch_refusals >= 2);
  CHECK(first_epoch_refusals <= 4);
  CHECK(c->hardware_refusals == first_epoch_refusals);  // the second epoch did not ask the engines
  CHECK(c->images_hardware == 30);
  if (off_engines)
    CHECK(c->images_cuda + c->images_workers == 2);  // the workers may have read epoch 2's file 5 already
  else
    CHECK(c->images_cuda == 2);
  CHECK(c->host_fallbacks == 0);
  CHECK(c->state_waits == 0);
  // File 5 explained the refusal with regions: the engines still decode regions.
  if (regions) CHECK_THAT(decoder->describe(), Catch::Contains("each crop's region only"));
}

// Deliverable: decode the region of interest where the backend allows. The engines decoding only
// each train crop's source rectangle must give the batches they give decoding whole images.
TEST_CASE("the JPEG engines decoding each crop's region give the batches of whole-image decoding", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  nvjpeg_options with = small_options(), without = small_options();
  without.regions = false;
  auto regions = nvjpeg_decoder(device, with);
  auto whole = nvjpeg_decoder(device, without);
  INFO(regions->describe());
  const auto ds = read_image_folder(baseline_folder(), "train");
  batch_loader a(ds, options(true)), b(ds, options(true));  // the same seed: the same crops
  for (int k = 0; k < 2; ++k) {
    regions->submit(a.next(), a);
    const at::Tensor got = regions->take().images.cpu();
    regions->step_done();
    whole->submit(b.next(), b);
    const at::Tensor want = whole->take().images.cpu();
    whole->step_done();
    const double max_abs = (got - want).abs().max().item<double>();
    WARN("batch " << k << ": regions against whole images differ by up to " << max_abs);
    CHECK(max_abs < 0.02);  // within one grey level, 1 / (255 * 0.229) = 0.017 after normalisation
  }
  const device_decode_counts* c = regions->decode_counts();
  WARN(c->images_region << " of " << c->images_hardware << " hardware images decoded as regions");
  CHECK(c->images_region <= c->images_hardware);
  CHECK(c->state_waits == 0);
  CHECK(whole->decode_counts()->images_region == 0);
  if (c->images_hardware == 0) WARN("no JPEG engines on this GPU: both decoded every image whole");
}

// Deliverable: submit never waits for the device. The side stream is held behind a long kernel
// on the compute stream (the step of the batch before); submit must return with the decode still
// queued behind it. A submit that synchronised the device, the side stream or an event of it
// would return only after the kernel, and the side stream would then be idle.
TEST_CASE("nvJPEG submit with copy_stream never waits for the device", "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  const c10::Device device(c10::kCUDA, 0);
  const auto ds = read_image_folder(baseline_folder(), "train");
  for (bool pinned : {false, true}) {
    INFO((pinned ? "pinned file ring" : "pageable files"));
    nvjpeg_options no = small_options();
    no.copy_stream = true;
    auto decoder = nvjpeg_decoder(device, no);
    const auto* lane = dynamic_cast<const copy_lane*>(decoder.get());
    REQUIRE(lane);
    REQUIRE(lane->stream());
    loader_options o = options(true);
    o.pin_memory = pinned;
    if (pinned) o.file_ring_bytes = batch_loader::file_ring_size(o);
    batch_loader files(ds, o);
    // Warm up: the first submit allocates the batch buffers and nvJPEG's own, and the pixel arenas
    // grow to a quarter beyond the largest batch so far (a new size waits for the stream once).
    for (int b = 0; b < 3; ++b) {
      decoder->submit(files.next(), files);
      decoder->take();
      decoder->step_done();
    }
    decoder->submit(files.next(), files);
    decoder->take();
    const std::int64_t arena_waits = decoder->decode_counts()->arena_waits;
    const std::int64_t wait_ns = decoder->decode_counts()->wait_ns;
    at::cuda::sleep(std::int64_t{4} << 30);  // the "step": seconds of spinning on the compute stream
    decoder->step_done();                    // the side stream now waits for it
    const host_batch& next = files.next();
    decoder->submit(next, files);
    // The promise is the pinned ring's: nvJPEG copies pageable file bytes up synchronously, and
    // whether such a copy waits for the stream it is issued on is not documented (the reason
    // data.pin_memory pins them). For pageable files what happened is shown, not held.
    const auto still_queued = [&](const char* when) {
      const bool queued = cudaStreamQuery(lane->stream()->stream()) == cudaErrorNotReady;
      if (pinned)
        CHECK(queued);
      else if (!queued)
        WARN("pageable files: submit returned after the held side stream ran (" << when << ")");
    };
    still_queued("the first submit behind the step");
    // One more, while the side stream is still held: a decode state whose batch is queued behind
    // the "step" is not reused, and submit does not wait for it either.
    decoder->take();
    decoder->step_done();
    decoder->submit(files.next(), files);
    still_queued("the second submit behind the step");
    CHECK(decoder->decode_counts()->state_waits == 0);
    // Neither waited for the crops of an arena or for new arenas: the arenas hold whole images,
    // and no batch of these files needs more than 1.12 times their mean batch, under the quarter
    // the arenas were grown beyond the largest batch of the warm-up (two epochs).
    CHECK(decoder->decode_counts()->arena_waits == arena_waits);
    CHECK(decoder->decode_counts()->wait_ns == wait_ns);  // no host time in waits either
    decoder->take();
    decoder->step_done();
    c10::cuda::device_synchronize();
  }
}

// Deliverable: one batch ahead works with the CUDA graph step: the graph copies each taken batch
// into its static inputs after the decode's event, and trains on the decoded JPEGs.
TEST_CASE("run with data.decode: device, copy_stream, pin_memory and cuda_graph trains on the decoded batches",
          "[gpu]") {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
  // fp32 with the graph alone; fp16 under backend.compile, where the decode writes fp16 NHWC
  // batches, which the graph step copies into its static input of the same dtype.
  const bool fp16 = GENERATE(false, true);
  INFO((fp16 ? "amp fp16, backend.compile" : "fp32, backend.cuda_graph"));
  const auto dir = tbtest::scratch(fp16 ? "gpu-decode-graph-fp16" : "gpu-decode-graph");
  tbtest::write_text(dir / "p.yaml",
                     "name: nvjpeg-graph\ndevice: cuda\nmodel: {arch: resnet18, num_classes: 2}\n"
                     "data: {source: imagefolder, path: '" +
                         baseline_folder().string() +
                         "', split: train, image_size: 64, decode: device, workers: 2, pin_memory: true}\n"
                         "train: {batch_size: 4" +
                         std::string(fp16 ? ", amp: fp16}\n" : "}\n") +
                         "transfer: {non_blocking: true, copy_stream: true}\n" +
                         (fp16 ? "backend: {compile: true}\n" : "backend: {cuda_graph: true}\n") +
                         "measure: {warmup_batches: 4, measured_batches: 2, repeats: 2}\n");
  const auto r = tbtest::run_cli("run --strict --config '" + (dir / "p.yaml").string() + "' --out '" +
                                 (dir / "r.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "r.json");
  CHECK(j["effective"]["decode"] == "device");
  CHECK(j["effective"]["cuda_graph"] == true);
  CHECK_THAT(j["effective"]["transfer"].get<std::string>(),
             Catch::Contains(fp16 ? "into float16 NHWC batches" : "into float32 NCHW batches"));
  for (const auto& note : j["effective"]["notes"]) CHECK(note.get<std::string>().find("pin_memory") == std::string::npos);
  const auto& dd = j["results"]["device_decode"];
  CHECK(dd["pageable_batches"] == 0);
  CHECK(dd["images_device"].get<std::int64_t>() >= 4 * 4);
  CHECK(std::isfinite(j["results"]["loss"]["last"].get<double>()));
}
