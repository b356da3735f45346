#include <zlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "trainbench/data/dataset.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {
void write_bytes(const fs::path& f, const std::string& bytes) {
  fs::create_directories(f.parent_path());
  std::ofstream(f, std::ios::binary) << bytes;
}
void write_gz(const fs::path& f, const std::string& bytes) {
  gzFile g = gzopen(f.c_str(), "wb");
  gzwrite(g, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(g);
}
std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  std::string s = be32(0x803) + be32(n) + be32(rows) + be32(cols);
  for (std::uint32_t i = 0; i < n * rows * cols; ++i) s += static_cast<char>(i % 251);
  return s;
}
std::string idx_labels(std::uint32_t n) {
  std::string s = be32(0x801) + be32(n);
  for (std::uint32_t i = 0; i < n; ++i) s += static_cast<char>(i % 10);
  return s;
}
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("cifar10 reads the official binary layout") {
  const auto dir = tbtest::scratch("cifar");
  // Two records by hand: label, then R, G, B planes.
  std::string rec(2 * 3073, '\0');
  rec[0] = 3;
  rec[1] = 10;                // R of pixel 0
  rec[1 + 1024] = 20;         // G of pixel 0
  rec[1 + 2048 + 1023] = 30;  // B of the last pixel
  rec[3073] = 9;
  for (int f = 1; f <= 5; ++f) write_bytes(dir / ("data_batch_" + std::to_string(f) + ".bin"), rec);
  write_bytes(dir / "test_batch.bin", rec.substr(0, 3073));
  auto train = read_cifar10(dir, "train");
  CHECK(train->size() == 10);
  CHECK(train->channels() == 3);
  CHECK(train->height() == 32);
  const auto s = train->sample(0);
  CHECK(s.label == 3);
  CHECK(s.pixels[0] == 10);
  CHECK(s.pixels[1] == 20);
  CHECK(s.pixels[1023 * 3 + 2] == 30);
  CHECK(train->sample(1).label == 9);
  CHECK(read_cifar10(dir, "test")->size() == 1);
}

TEST_CASE("cifar10 errors name the file and what is wrong") {
  const auto dir = tbtest::scratch("cifar-bad");
  CHECK(error_of([&] { read_cifar10(dir, "train"); }).find("data_batch_1.bin") != std::string::npos);
  write_cifar10(dir, 10, 2, 0);
  write_bytes(dir / "data_batch_3.bin", std::string(3000, '\0'));
  CHECK(error_of([&] { read_cifar10(dir, "train"); }).find("truncated") != std::string::npos);
  std::string bad(3073, '\0');
  bad[0] = 12;
  write_bytes(dir / "data_batch_3.bin", bad);
  CHECK(error_of([&] { read_cifar10(dir, "train"); }).find("label 12") != std::string::npos);
}

TEST_CASE("make-dataset writes a CIFAR-10 layout the reader accepts") {
  const auto dir = tbtest::scratch("cifar-gen");
  write_cifar10(dir, 23, 4, 7);
  auto ds = read_cifar10(dir, "train");
  CHECK(ds->size() == 23);
  CHECK(read_cifar10(dir, "test")->size() == 4);
  CHECK(fs::exists(dir / "GENERATED"));
  for (std::int64_t i = 0; i < ds->size(); ++i) CHECK(ds->sample(i).label < 10);
}

TEST_CASE("IDX files, plain or gzip, grayscale") {
  const auto dir = tbtest::scratch("idx");
  write_gz(dir / "train-images-idx3-ubyte.gz", idx_images(5, 4, 3));
  write_gz(dir / "train-labels-idx1-ubyte.gz", idx_labels(5));
  write_bytes(dir / "t10k-images-idx3-ubyte", idx_images(2, 4, 3));
  write_bytes(dir / "t10k-labels-idx1-ubyte", idx_labels(2));
  auto train = read_idx(dir, "train", "fashion-mnist");
  CHECK(train->size() == 5);
  CHECK(train->channels() == 1);
  CHECK(train->height() == 4);
  CHECK(train->width() == 3);
  CHECK(train->sample(1).pixels[0] == 12);
  CHECK(train->sample(4).label == 4);
  CHECK(read_idx(dir, "test", "mnist")->size() == 2);
}

TEST_CASE("IDX errors: bad magic, truncated file, label out of range, missing files") {
  const auto dir = tbtest::scratch("idx-bad");
  CHECK(error_of([&] { read_idx(dir, "train", "mnist"); }).find("train-images-idx3-ubyte") != std::string::npos);
  write_bytes(dir / "train-labels-idx1-ubyte", idx_labels(5));
  std::string images = idx_images(5, 4, 3);
  images[3] = 0x01;
  write_bytes(dir / "train-images-idx3-ubyte", images);
  CHECK(error_of([&] { read_idx(dir, "train", "mnist"); }).find("magic") != std::string::npos);
  write_bytes(dir / "train-images-idx3-ubyte", idx_images(5, 4, 3).substr(0, 40));
  CHECK(error_of([&] { read_idx(dir, "train", "mnist"); }).find("truncated") != std::string::npos);
  write_bytes(dir / "train-images-idx3-ubyte", idx_images(5, 4, 3));
  std::string labels = idx_labels(5);
  labels[9] = 42;
  write_bytes(dir / "train-labels-idx1-ubyte", labels);
  CHECK(error_of([&] { read_idx(dir, "train", "mnist"); }).find("label 42") != std::string::npos);
}

TEST_CASE("Debian's Fashion-MNIST package reads when installed") {
  const fs::path dir = default_data_path(data_source::fashion_mnist);
  if (!fs::exists(dir / "train-images-idx3-ubyte.gz")) return;  // not installed on this host
  auto ds = read_idx(dir, "train", "fashion-mnist");
  CHECK(ds->size() == 60000);
  CHECK(ds->height() == 28);
}

TEST_CASE("synthetic data is seeded and held in memory") {
  auto a = make_synthetic(10, 8, 3, 10, 5), b = make_synthetic(10, 8, 3, 10, 5), c = make_synthetic(10, 8, 3, 10, 6);
  CHECK(std::equal(a->sample(3).pixels, a->sample(3).pixels + 192, b->sample(3).pixels));
  CHECK_FALSE(std::equal(a->sample(3).pixels, a->sample(3).pixels + 192, c->sample(3).pixels));
}

TEST_CASE("a crafted IDX header whose sizes wrap in 64 bits exits 2 naming the file") {
  // 65536 images of 2^24 x 2^24: count * rows * cols is 2^64, which wraps to 0 = a 16-byte
  // file's pixel bytes. The labels file is consistent, so only the header's sizes are wrong.
  const auto dir = tbtest::scratch("idx-crafted");
  write_bytes(dir / "train-images-idx3-ubyte", be32(0x803) + be32(65536) + be32(1u << 24) + be32(1u << 24));
  write_bytes(dir / "train-labels-idx1-ubyte", be32(0x801) + be32(65536) + std::string(65536, '\0'));
  const std::string e = error_of([&] { read_idx(dir, "train", "mnist"); });
  CHECK_THAT(e, Catch::Contains("train-images-idx3-ubyte") && Catch::Contains("16777216x16777216"));

  const auto r = tbtest::run_cli("run --config " + tbtest::tiny_profile(dir) + " --set data.source=mnist --set " +
                                 "data.path=" + dir.string() + " --set data.fallback=synthetic");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains((dir / "train-images-idx3-ubyte").string()));
  CHECK_FALSE(fs::exists(dir / "tiny.json"));

  // Sizes within the bounds that do not match the file are caught too.
  write_bytes(dir / "train-images-idx3-ubyte", be32(0x803) + be32(1) + be32(65536) + be32(65536));
  write_bytes(dir / "train-labels-idx1-ubyte", idx_labels(1));
  CHECK_THAT(error_of([&] { read_idx(dir, "train", "mnist"); }), Catch::Contains("truncated?"));
  write_bytes(dir / "train-images-idx3-ubyte", be32(0x803) + be32(1) + be32(0) + be32(28));
  CHECK_THAT(error_of([&] { read_idx(dir, "train", "mnist"); }), Catch::Contains("corrupt header?"));
}

TEST_CASE("data.fallback: synthetic stands in for missing files only, a truncated file exits 2 naming it") {
  const auto dir = tbtest::scratch("cifar-truncated");
  const auto made = tbtest::run_cli("make-dataset cifar10 --samples 50 --out " + (dir / "cifar").string());
  REQUIRE(made.code == 0);
  const fs::path third = dir / "cifar" / "data_batch_3.bin";
  fs::resize_file(third, fs::file_size(third) - 100);
  const auto r = tbtest::run_cli("run --config " + tbtest::tiny_profile(dir) + " --set data.source=cifar10 --set " +
                                 "data.path=" + (dir / "cifar").string() + " --set data.fallback=synthetic");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains(third.string()) && Catch::Contains("truncated?"));
  CHECK_FALSE(fs::exists(dir / "tiny.json"));
}
