// data.decode: device: the nvJPEG stage's decisions that need no GPU (status classes, which files
// the host decodes, how much pixel memory is kept) and the host half of its fallback.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <numeric>

#include "alloc_count.hpp"
#include "helpers.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/jpeg_markers.hpp"
#include "trainbench/report/pooling.hpp"
#include "trainbench/stages/device_decode.hpp"

using namespace trainbench;

namespace {

std::vector<std::uint8_t> gradient(int w, int h) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        px[(static_cast<std::size_t>(y) * w + x) * 3 + c] = static_cast<std::uint8_t>(x * 3 + y * 2 + c * 20);
  return px;
}

}  // namespace

TEST_CASE("every nvJPEG status has its class: only bitstream and layout statuses fall back", "[decode]") {
  CHECK(classify_nvjpeg_status(0) == nvjpeg_outcome::decoded);
  // BAD_JPEG, JPEG_NOT_SUPPORTED, INCOMPLETE_BITSTREAM, IMPLEMENTATION_NOT_SUPPORTED
  for (int s : {3, 4, 10, 9}) {
    INFO(nvjpeg_status_name(s));
    CHECK(classify_nvjpeg_status(s) == nvjpeg_outcome::cannot_decode);
  }
  // NOT_INITIALIZED, INVALID_PARAMETER, ALLOCATOR_FAILURE, EXECUTION_FAILED, ARCH_MISMATCH,
  // INTERNAL_ERROR: the run's fault or the device's, never hidden.
  for (int s : {1, 2, 5, 6, 7, 8}) {
    INFO(nvjpeg_status_name(s));
    CHECK(classify_nvjpeg_status(s) == nvjpeg_outcome::fatal);
  }
  CHECK(classify_nvjpeg_status(11) == nvjpeg_outcome::fatal);  // a status newer than the table
  CHECK(classify_nvjpeg_status(-1) == nvjpeg_outcome::fatal);
  CHECK(std::string(nvjpeg_status_name(6)) == "NVJPEG_STATUS_EXECUTION_FAILED");
}

namespace {

std::vector<std::uint8_t> fixture_bytes(const std::string& name) {
  std::ifstream in(tbtest::source_dir() / "tests/fixtures/jpeg" / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

decode_backend backend_of(const std::vector<std::uint8_t>& bytes, bool engines) {
  return choose_backend(read_jpeg_markers(bytes.data(), bytes.size()), engines);
}

// A Motion Photo: the JPEG, then a video whose bytes hold a JPEG-like FF D8 ... FF D9.
std::vector<std::uint8_t> with_trailer(std::vector<std::uint8_t> b) {
  const std::uint8_t inner[] = {0, 0, 0, 24, 'f', 't', 'y', 'p', 0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0, 0, 0xFF, 0xD9};
  for (int k = 0; k < 64; ++k) b.insert(b.end(), std::begin(inner), std::end(inner));
  return b;
}

}  // namespace

TEST_CASE("the backend per file: engines for baseline, CUDA for progressive, the host for what nvJPEG refuses",
          "[decode]") {
  struct expect {
    const char* file;
    decode_backend with_engines, without;
  };
  for (const expect& e : {expect{"color420.jpg", decode_backend::hardware, decode_backend::cuda},
                          expect{"color444.jpg", decode_backend::hardware, decode_backend::cuda},
                          expect{"gray.jpg", decode_backend::hardware, decode_backend::cuda},
                          expect{"progressive.jpg", decode_backend::cuda, decode_backend::cuda},
                          expect{"cmyk.jpg", decode_backend::host, decode_backend::host},
                          expect{"cmyk_k.jpg", decode_backend::host, decode_backend::host}}) {
    INFO(e.file);
    const auto bytes = fixture_bytes(e.file);
    CHECK(backend_of(bytes, true) == e.with_engines);
    CHECK(backend_of(bytes, false) == e.without);
    // A Motion Photo's trailing video changes nothing: the markers end at the image's EOI.
    CHECK(backend_of(with_trailer(bytes), true) == e.with_engines);
  }
  const int w = 48, h = 32;
  const auto px = gradient(w, h);
  const auto arith = tbtest::encode_arithmetic_jpeg(px.data(), w, h);
  CHECK(backend_of(arith, true) == decode_backend::host);
  CHECK(backend_of(arith, false) == decode_backend::host);
  // Coded as RGB (Adobe transform 0): libjpeg converts no colour; nvJPEG would read YCbCr.
  const auto rgb = tbtest::encode_rgb_coded_jpeg(px.data(), w, h);
  CHECK(read_jpeg_markers(rgb.data(), rgb.size()).rgb_coded());
  CHECK(backend_of(rgb, true) == decode_backend::host);
  CHECK(backend_of(rgb, false) == decode_backend::host);
  const auto ycc = tbtest::encode_libjpeg(px.data(), w, h, false, false);
  CHECK_FALSE(read_jpeg_markers(ycc.data(), ycc.size()).rgb_coded());
  CHECK(backend_of(ycc, true) == decode_backend::hardware);
  // Truncated: no end-of-image marker; not a JPEG: the host decoder says what is wrong with it.
  const auto base = fixture_bytes("color420.jpg");
  CHECK(backend_of({base.begin(), base.end() - 10}, true) == decode_backend::host);
  CHECK(backend_of({0x89, 'P', 'N', 'G', 0, 0}, true) == decode_backend::host);
}

TEST_CASE("the backend per frame: process, precision, components and subsampling", "[decode]") {
  jpeg_markers m;
  m.frame_marker = 0xC0;
  m.process = jpeg_process::baseline;
  m.precision = 8;
  m.width = 64;
  m.height = 48;
  m.components = 3;
  m.component = {jpeg_component{1, 2, 2}, {2, 1, 1}, {3, 1, 1}, {}};
  m.end = 1000;
  REQUIRE(m.ok());
  CHECK(choose_backend(m, true) == decode_backend::hardware);
  CHECK(choose_backend(m, false) == decode_backend::cuda);
  auto with = [&](auto change) {
    jpeg_markers c = m;
    change(c);
    return choose_backend(c, true);
  };
  CHECK(with([](jpeg_markers& c) { c.component[0] = {1, 2, 1}; }) == decode_backend::hardware);  // 4:2:2
  CHECK(with([](jpeg_markers& c) { c.component[0] = {1, 4, 1}; }) == decode_backend::cuda);      // 4:1:1
  CHECK(with([](jpeg_markers& c) { c.component[1] = {2, 2, 1}; }) == decode_backend::cuda);      // odd chroma
  CHECK(with([](jpeg_markers& c) { c.process = jpeg_process::extended; }) == decode_backend::cuda);
  CHECK(with([](jpeg_markers& c) { c.process = jpeg_process::progressive; }) == decode_backend::cuda);
  CHECK(with([](jpeg_markers& c) { c.process = jpeg_process::lossless; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.process = jpeg_process::hierarchical; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.arithmetic = true; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.precision = 12; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.components = 4; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.components = 2; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.end = 0; }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) { c.refused = "unsupported JPEG marker 0xfffd"; }) == decode_backend::host);
  // Three components coded as RGB, as libjpeg decides it: JFIF first, then Adobe's transform,
  // then the component ids.
  const auto rgb_ids = [](jpeg_markers& c) {
    c.component[0].id = 'R';
    c.component[1].id = 'G';
    c.component[2].id = 'B';
  };
  CHECK(with(rgb_ids) == decode_backend::host);
  CHECK(with([&](jpeg_markers& c) {
          rgb_ids(c);
          c.jfif = true;
        }) == decode_backend::hardware);
  CHECK(with([](jpeg_markers& c) {
          c.adobe = true;
          c.adobe_transform = 0;
        }) == decode_backend::host);
  CHECK(with([](jpeg_markers& c) {
          c.adobe = true;
          c.adobe_transform = 1;
        }) == decode_backend::hardware);
  CHECK(with([&](jpeg_markers& c) {
          rgb_ids(c);
          c.adobe = true;
          c.adobe_transform = 1;
        }) == decode_backend::hardware);
  CHECK(with([](jpeg_markers& c) {
          c.adobe = true;
          c.adobe_transform = 0;
          c.jfif = true;
        }) == decode_backend::hardware);
  CHECK(std::string(backend_name(decode_backend::cuda)) == "cuda");
}

// The host half of the fallback: libjpeg-turbo decodes the file nvJPEG refuses, whole.
TEST_CASE("the host decoder reads an arithmetic-coded JPEG whole", "[decode]") {
  const int w = 48, h = 32;
  const auto px = gradient(w, h);
  const auto arith = tbtest::encode_arithmetic_jpeg(px.data(), w, h);
  jpeg_decoder d;
  const jpeg_info info = d.open(arith.data(), arith.size(), 1 << 20);
  REQUIRE(info.width == w);
  REQUIRE(info.height == h);
  const decoded_pixels out = d.decode({1, 0, w, 0, h});
  CHECK(out.x0 == 0);
  CHECK(out.width >= w);
  CHECK(out.rows >= h);
  CHECK(out.channels == 3);
  double diff = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w * 3; ++x)
      diff += std::abs(int(out.data[static_cast<std::size_t>(y) * out.stride + x]) - int(px[static_cast<std::size_t>(y) * w * 3 + x]));
  CHECK(diff / (w * h * 3) < 8);  // JPEG at quality 90, not garbage
}

TEST_CASE("each image of a batch has its own aligned region of the pixel arena", "[decode]") {
  const std::vector<std::int64_t> bytes = {100, 256, 1, 3 * 4000 * 3000};
  const arena_layout l = layout_arena(bytes);
  REQUIRE(l.offsets.size() == bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    CHECK(l.offsets[i] % arena_alignment == 0);
    const std::int64_t end = l.offsets[i] + bytes[i];
    CHECK(end <= (i + 1 < bytes.size() ? l.offsets[i + 1] : l.total));  // no overlap with the next
  }
  CHECK(l.total < std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0}) + 4 * arena_alignment);
  CHECK(layout_arena({}).total == 0);
}

// At batch 256 with 12-MP photos among 0.5-MP ones, per-position buffers that only grow tend to
// 256 x 36 MB; the arena holds what recent batches needed, and lets a spike go.
TEST_CASE("the pixel arena grows to a batch's need and gives a spike back", "[decode]") {
  const std::int64_t small = 500 * 1000 * 3, large = 4000 * 3000 * 3;
  arena_sizer sizer(16, 2.0);
  std::int64_t held = 0, peak = 0;
  auto batch_need = [&](int large_images) {
    std::vector<std::int64_t> bytes(256, small);
    for (int k = 0; k < large_images; ++k) bytes[static_cast<std::size_t>(k * 37 % 256)] = large;
    return layout_arena(bytes).total;
  };
  // Every 50th batch, 64 of its files are large: positions 0, 37, 74, ... (mod 256), so a
  // buffer per batch position that only grows would end up 64 x 36 MB plus 192 x 1.5 MB.
  for (int b = 0; b < 200; ++b) {
    const std::int64_t need = batch_need(b % 50 == 7 ? 64 : 0);
    held = sizer.capacity_for(need, held);
    CHECK(held >= need);  // never smaller than the batch at hand
    peak = std::max(peak, held);
  }
  CHECK(peak == batch_need(64));  // the largest batch
  CHECK(held == batch_need(0));   // the spike given back once recent batches are typical again
  // A steady stream keeps its arena: no reallocation per batch.
  arena_sizer steady;
  std::int64_t h = steady.capacity_for(1000, 0);
  for (int b = 0; b < 40; ++b) CHECK(steady.capacity_for(900 + b % 3 * 50, h) == h);
  // ... and allocates nothing to decide so.
  std::int64_t same = 0, allocations = 0;
  {
    tbtest::thread_allocations counted;
    for (int b = 0; b < 100; ++b) same += steady.capacity_for(900 + b % 3 * 50, h) == h ? 1 : 0;
    allocations = counted.count();
  }
  CHECK(same == 100);
  CHECK(allocations == 0);
}

// The nvJPEG stage's `read` fences: a pool of events recorded round robin. A batch is proved done
// by its own event while that still holds it, else by the oldest batch the pool holds; never by an
// event that holds an earlier batch only (that would free file bytes still being read).
TEST_CASE("a batch's read fence is its own event while the pool holds it, else the oldest batch held", "[decode]") {
  read_fence_slots slots(4);
  std::vector<std::int64_t> holds(4, -1);  // the batch each event was last recorded for
  auto record = [&](std::int64_t b) {
    holds[slots.slot_for(b)] = b;
    slots.recorded(b);
  };
  for (std::int64_t b = 0; b < 3; ++b) record(b);
  for (std::int64_t b = 0; b < 3; ++b) CHECK(slots.proof(b) == slots.slot_for(b));
  for (std::int64_t latest = 3; latest < 40; ++latest) {
    record(latest);
    for (std::int64_t b = 0; b <= latest; ++b) {
      const std::int64_t by = holds[slots.proof(b)];
      INFO("batch " << b << ", latest " << latest << ": proved by " << by);
      CHECK(by >= b);                                   // never an earlier batch
      CHECK(by == std::max(b, latest - 3));            // and the earliest one that proves it
    }
  }
}

TEST_CASE("device decode counts survive the state file and pool: counts summed, memory the largest", "[decode]") {
  run_result a, b;
  auto counts = [](std::vector<device_decode_window> windows, std::int64_t device, std::int64_t hardware,
                   std::int64_t fallbacks, std::int64_t replaced, std::int64_t held, std::int64_t peak) {
    device_decode_result d;
    d.windows = std::move(windows);
    d.images_device = device;
    d.images_hardware = hardware;
    d.images_region = hardware / 2;
    d.state_waits = 1;
    d.hardware_refusals = 3;
    d.hardware_refused_files = 1;
    d.arena_waits = 2;
    d.host_wait_s = 0.0625;
    d.images_cuda = device - hardware;
    d.host_fallbacks = fallbacks;
    d.pageable_batches = 1;
    d.replaced_samples = replaced;
    d.bytes_held = held;
    d.peak_bytes_held = peak;
    d.submit_host_s = {0.5, 1.0, 2.0, 0.25, 0.125};
    return d;
  };
  a.device_decode = counts({{64, 2, 60, 4, 0, 0.75, 0, 3}, {64, 0, 64, 0, 1, 0.5}}, 200, 190, 3, 1, 4096, 8192);
  b.device_decode = counts({{60, 4, 0, 60, 0}}, 150, 0, 5, 0, 16384, 16384);
  const run_result back = run_result_from_json(nlohmann::json::parse(run_result_to_json(a).dump()));
  REQUIRE(back.device_decode);
  CHECK(back.device_decode->windows.size() == 2);
  CHECK(back.device_decode->windows[0].host_fallbacks == 2);
  CHECK(back.device_decode->windows[0].images_hardware == 60);
  CHECK(back.device_decode->windows[0].images_cuda == 4);
  CHECK(back.device_decode->windows[1].pageable_batches == 1);
  CHECK(back.device_decode->images_hardware == 190);
  CHECK(back.device_decode->images_region == 95);
  CHECK(back.device_decode->state_waits == 1);
  CHECK(back.device_decode->windows[0].hardware_refusals == 3);
  CHECK(back.device_decode->windows[1].hardware_refusals == 0);
  CHECK(back.device_decode->hardware_refusals == 3);
  CHECK(back.device_decode->hardware_refused_files == 1);
  CHECK(back.device_decode->arena_waits == 2);
  CHECK(back.device_decode->host_wait_s == 0.0625);
  CHECK(back.device_decode->windows[0].submit_host_s == 0.75);
  CHECK(back.device_decode->submit_host_s.cuda == 2.0);
  CHECK(back.device_decode->submit_host_s.crop == 0.125);
  CHECK(back.device_decode->host_fallbacks == 3);
  CHECK(back.device_decode->peak_bytes_held == 8192);
  const run_result pooled = pool_rounds({a, b, run_result{}});
  REQUIRE(pooled.device_decode);
  const auto& d = *pooled.device_decode;
  CHECK(d.windows.size() == 3);
  CHECK(d.images_device == 350);
  CHECK(d.images_hardware == 190);
  CHECK(d.images_region == 95);
  CHECK(d.state_waits == 2);
  CHECK(d.hardware_refusals == 6);
  CHECK(d.hardware_refused_files == 2);
  CHECK(d.arena_waits == 4);
  CHECK(d.host_wait_s == 0.125);
  CHECK(d.images_cuda == 160);
  CHECK(d.pageable_batches == 2);
  CHECK(d.submit_host_s.hardware == 2.0);  // summed over the rounds
  CHECK(d.submit_host_s.route == 1.0);
  CHECK(d.host_fallbacks == 8);
  CHECK(d.replaced_samples == 1);
  CHECK(d.bytes_held == 16384);
  CHECK(d.peak_bytes_held == 16384);
  CHECK_FALSE(pool_rounds({run_result{}}).device_decode);  // host decoding: null, not zeros
}

// A batch the engines refuse whole is split until the files they refuse alone are found: every
// refused file and only those, each good image decoded exactly once, and few calls.
TEST_CASE("a batch the JPEG engines refuse whole is split until the refused files are found", "[decode]") {
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{64}, std::size_t{256});
  const std::vector<std::vector<std::size_t>> bad_sets = {{0}, {n - 1}, {n / 2}, {0, n - 1}, {1, 2, 3}};
  for (std::vector<std::size_t> bad : bad_sets) {
    bad.erase(std::remove_if(bad.begin(), bad.end(), [&](std::size_t b) { return b >= n; }), bad.end());
    std::sort(bad.begin(), bad.end());
    bad.erase(std::unique(bad.begin(), bad.end()), bad.end());
    if (bad.empty()) continue;
    INFO(n << " images, " << bad.size() << " refused, the first at " << bad.front());
    std::vector<int> decoded(n, 0);
    int calls = 0;
    const auto decode = [&](std::size_t first, std::size_t count) {
      ++calls;
      REQUIRE(count > 0);
      REQUIRE(first + count <= n);
      for (std::size_t k = first; k < first + count; ++k)
        if (std::binary_search(bad.begin(), bad.end(), k)) return false;
      for (std::size_t k = first; k < first + count; ++k) ++decoded[k];
      return true;
    };
    std::vector<std::size_t> refused;
    isolate_refused(0, n, decode, refused);
    std::sort(refused.begin(), refused.end());
    CHECK(refused == bad);
    for (std::size_t k = 0; k < n; ++k) {
      INFO("image " << k);
      CHECK(decoded[k] == (std::binary_search(bad.begin(), bad.end(), k) ? 0 : 1));
    }
    // Each refused file costs at most 2 calls per halving and one alone (of 256: 17).
    std::size_t levels = 0;
    while ((std::size_t{1} << levels) < n) ++levels;
    CHECK(calls <= static_cast<int>(bad.size() * (2 * levels + 1)));
  }
}

TEST_CASE("isolating the refused files: a refusal that does not come back isolates no file", "[decode]") {
  // Every later call is taken: each image is decoded once, none is declared refused, and the
  // inferred refusals are checked down to the last single image.
  std::vector<std::size_t> refused;
  std::vector<int> decoded(16, 0);
  int calls = 0;
  isolate_refused(
      0, 16,
      [&](std::size_t first, std::size_t count) {
        ++calls;
        for (std::size_t k = first; k < first + count; ++k) ++decoded[k];
        return true;
      },
      refused);
  CHECK(refused.empty());
  CHECK(decoded == std::vector<int>(16, 1));
  CHECK(calls == 5);  // 8, 4, 2, 1 and the last image alone
}
