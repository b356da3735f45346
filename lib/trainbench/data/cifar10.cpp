// CIFAR-10 binary layout: records of 1 label byte + 3072 pixel bytes (1024 R, 1024 G, 1024 B).
#include <fstream>
#include <random>

#include "trainbench/data/dataset.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {
constexpr int side = 32;
constexpr int plane = side * side;
constexpr int record = 1 + 3 * plane;
constexpr int classes = 10;

std::vector<std::string> files_for(const std::string& split) {
  if (split == "test") return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"};
}

const char* where_to_get =
    "get the binary version from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz, or make a "
    "random one with 'trainbench make-dataset cifar10 --out DIR'";
}  // namespace

std::shared_ptr<const dataset> read_cifar10(const fs::path& dir, const std::string& split) {
  const auto names = files_for(split);
  for (const auto& n : names) {
    if (!fs::is_regular_file(dir / n)) {
      throw dataset_missing("cifar10: missing '" + (dir / n).string() + "'; split '" + split + "' expects " +
                            std::to_string(names.size()) + " file(s) (" + names.front() +
                            (names.size() > 1 ? " ... " + names.back() : "") + ") in '" + dir.string() + "'; " +
                            where_to_get);
    }
  }
  std::vector<std::uint8_t> pixels;
  std::vector<int> labels;
  for (const auto& n : names) {
    const fs::path file = dir / n;
    const std::string bytes = read_text_file(file);
    if (bytes.empty() || bytes.size() % record != 0) {
      throw input_error("cifar10: '" + file.string() + "' has " + std::to_string(bytes.size()) +
                        " bytes, not a multiple of the " + std::to_string(record) + "-byte record (truncated?)");
    }
    const std::size_t count = bytes.size() / record;
    const std::size_t first = labels.size();
    pixels.resize((first + count) * 3 * plane);
    labels.resize(first + count);
    for (std::size_t r = 0; r < count; ++r) {
      const auto* rec = reinterpret_cast<const std::uint8_t*>(bytes.data()) + r * record;
      if (rec[0] >= classes) {
        throw input_error("cifar10: '" + file.string() + "' record " + std::to_string(r) + " has label " +
                          std::to_string(rec[0]) + ", expected 0..9");
      }
      labels[first + r] = rec[0];
      // Planes R, G, B to interleaved HWC.
      std::uint8_t* out = pixels.data() + (first + r) * 3 * plane;
      for (int i = 0; i < plane; ++i) {
        out[3 * i + 0] = rec[1 + i];
        out[3 * i + 1] = rec[1 + plane + i];
        out[3 * i + 2] = rec[1 + 2 * plane + i];
      }
    }
  }
  return std::make_shared<memory_dataset>("cifar10 " + split + " (" + dir.string() + ")", side, side, 3, classes,
                                          std::move(pixels), std::move(labels));
}

void write_cifar10(const fs::path& dir, std::int64_t train_samples, std::int64_t test_samples, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto write = [&](const std::string& name, std::int64_t count) {
    std::string bytes(static_cast<std::size_t>(count) * record, '\0');
    for (std::int64_t r = 0; r < count; ++r) {
      char* rec = bytes.data() + r * record;
      rec[0] = static_cast<char>(rng() % classes);
      for (int i = 1; i < record; ++i) rec[i] = static_cast<char>(rng() >> 56);
    }
    write_file_atomic(dir / name, bytes);
  };
  const auto train = files_for("train");
  for (std::size_t f = 0; f < train.size(); ++f) {
    // Spread the samples over the five files as the real set does (10000 each at full size).
    const std::int64_t share = train_samples / 5 + (static_cast<std::int64_t>(f) < train_samples % 5 ? 1 : 0);
    write(train[f], share);
  }
  write("test_batch.bin", test_samples);
  write_file_atomic(dir / "batches.meta.txt", "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n");
  write_file_atomic(dir / "GENERATED", "random pixels and labels written by trainbench make-dataset\n");
}

}  // namespace trainbench
