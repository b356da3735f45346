// IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed.
#include <zlib.h>

#include <limits>

#include "trainbench/data/dataset.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

std::string read_maybe_gz(const fs::path& file) {
  gzFile f = gzopen(file.c_str(), "rb");  // reads plain files too
  if (!f) throw input_error("cannot open '" + file.string() + "'");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  const bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  const std::string what = failed ? std::string(msg ? msg : "read error") : std::string();
  gzclose(f);
  if (failed) throw input_error("'" + file.string() + "': " + what + " (truncated or corrupt gzip?)");
  return out;
}

std::uint32_t be32(const std::string& b, std::size_t at) {
  auto u = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + i])); };
  return (u(0) << 24) | (u(1) << 16) | (u(2) << 8) | u(3);
}

fs::path find_file(const fs::path& dir, const std::string& stem, const std::string& what) {
  for (const char* ext : {"", ".gz"}) {
    fs::path p = dir / (stem + ext);
    if (fs::is_regular_file(p)) return p;
  }
  std::string hint = what == "fashion-mnist" ? "install Debian's dataset-fashion-mnist package"
                                             : "download the IDX files from the dataset's home page";
  throw dataset_missing(what + ": missing '" + (dir / stem).string() + "[.gz]'; expected IDX files " +
                        "(train|t10k)-(images-idx3|labels-idx1)-ubyte[.gz] in '" + dir.string() + "'; " + hint);
}

}  // namespace

std::shared_ptr<const dataset> read_idx(const fs::path& dir, const std::string& split, const std::string& what) {
  const std::string prefix = split == "test" ? "t10k" : "train";
  const fs::path images_file = find_file(dir, prefix + "-images-idx3-ubyte", what);
  const fs::path labels_file = find_file(dir, prefix + "-labels-idx1-ubyte", what);
  const std::string images = read_maybe_gz(images_file);
  const std::string labels = read_maybe_gz(labels_file);
  if (images.size() < 16 || be32(images, 0) != 0x00000803) {
    throw input_error("'" + images_file.string() + "': bad IDX magic number (expected 0x00000803 for images)");
  }
  if (labels.size() < 8 || be32(labels, 0) != 0x00000801) {
    throw input_error("'" + labels_file.string() + "': bad IDX magic number (expected 0x00000801 for labels)");
  }
  const std::uint32_t count = be32(images, 4), rows = be32(images, 8), cols = be32(images, 12);
  // Bound the header's numbers before multiplying them: a crafted header (65536 images of
  // 2^24 x 2^24) would otherwise wrap the product to the size of a 16-byte file.
  if (count == 0 || rows == 0 || cols == 0 || rows > max_file_image_side || cols > max_file_image_side ||
      count > static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
    throw input_error("'" + images_file.string() + "': header says " + std::to_string(count) + " images of " +
                      std::to_string(rows) + "x" + std::to_string(cols) + "; expected 1 to 2^31-1 images of 1 to " +
                      std::to_string(max_file_image_side) + " pixels a side (corrupt header?)");
  }
  const std::uint64_t pixel_bytes = std::uint64_t{count} * rows * cols;  // < 2^31 * 2^32: no wrap
  if (images.size() - 16 != pixel_bytes) {
    throw input_error("'" + images_file.string() + "': header says " + std::to_string(count) + " images of " +
                      std::to_string(rows) + "x" + std::to_string(cols) + " (" + std::to_string(pixel_bytes) +
                      " pixel bytes) but the file has " + std::to_string(images.size() - 16) +
                      " pixel bytes (truncated?)");
  }
  if (be32(labels, 4) != count || labels.size() != 8 + static_cast<std::size_t>(count)) {
    throw input_error("'" + labels_file.string() + "': expected " + std::to_string(count) +
                      " labels to match the images file");
  }
  std::vector<int> label_values(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const int l = static_cast<unsigned char>(labels[8 + i]);
    if (l >= 10) {
      throw input_error("'" + labels_file.string() + "': label " + std::to_string(l) + " at index " +
                        std::to_string(i) + " is out of range 0..9");
    }
    label_values[i] = l;
  }
  std::vector<std::uint8_t> pixels(images.begin() + 16, images.end());
  return std::make_shared<memory_dataset>(what + " " + split + " (" + dir.string() + ")", static_cast<int>(rows),
                                          static_cast<int>(cols), 1, 10, std::move(pixels), std::move(label_values));
}

}  // namespace trainbench
