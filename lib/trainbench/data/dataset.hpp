#pragma once
// Datasets hold uint8 HWC images in memory; transforms and the loader read them through this.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

// The dataset's files are not there. Only this is what data.fallback: synthetic stands in for:
// files that are present but truncated or corrupt are an input_error whatever fallback says.
class dataset_missing : public input_error {
 public:
  using input_error::input_error;
};

// The largest image side a dataset file may declare: far beyond any real dataset, and small
// enough that sizes derived from a header (count x rows x cols) cannot wrap in 64 bits.
constexpr std::uint32_t max_file_image_side = 65536;

struct sample_view {
  const std::uint8_t* pixels;  // height x width x channels, row-major
  int label;
};

// A dataset of encoded files (imagefolder): one path and label per sample, decoded by the loader.
struct file_list {
  std::filesystem::path root;          // the folder the relative paths start from
  std::vector<std::string> classes;    // sorted folder names; label = position
  std::vector<char> names;             // relative paths, each ending in '\0'
  std::vector<std::uint64_t> offsets;  // start of each sample's path in `names`
  std::vector<int> labels;
  std::int64_t ignored_files = 0;  // files without a .jpg / .jpeg extension
  std::vector<std::string> empty_classes;
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  const char* relative(std::int64_t i) const { return names.data() + offsets[static_cast<std::size_t>(i)]; }
  std::string path(std::int64_t i) const { return (root / relative(i)).string(); }
};

class dataset {
 public:
  virtual ~dataset() = default;
  virtual std::int64_t size() const = 0;
  virtual int num_classes() const = 0;
  virtual int channels() const = 0;
  virtual int height() const = 0;
  virtual int width() const = 0;
  virtual sample_view sample(std::int64_t index) const = 0;
  virtual std::string describe() const = 0;
  // Non-null for datasets of files (their images vary in size: height() and width() are 0).
  virtual const file_list* files() const { return nullptr; }
};

// Images stored back to back, the common layout of every source here.
class memory_dataset : public dataset {
 public:
  memory_dataset(std::string description, int height, int width, int channels, int classes,
                 std::vector<std::uint8_t> pixels, std::vector<int> labels);
  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  int num_classes() const override { return classes_; }
  int channels() const override { return channels_; }
  int height() const override { return height_; }
  int width() const override { return width_; }
  sample_view sample(std::int64_t index) const override;
  std::string describe() const override { return description_; }

 private:
  std::string description_;
  int height_, width_, channels_, classes_;
  std::vector<std::uint8_t> pixels_;
  std::vector<int> labels_;
};

// The folder a source reads when data.path is empty.
std::filesystem::path default_data_path(data_source source);

// Opens the profile's source (not device-synthetic, which never touches the host).
// Throws dataset_missing for absent files, input_error naming the file for anything else wrong.
std::shared_ptr<const dataset> open_dataset(const data_config& cfg, int num_classes, std::uint64_t seed);

std::shared_ptr<const dataset> read_cifar10(const std::filesystem::path& dir, const std::string& split);
std::shared_ptr<const dataset> read_idx(const std::filesystem::path& dir, const std::string& split,
                                        const std::string& what);
// torchvision's ImageFolder layout: root/<class>/**/<file>.jpg|.jpeg (any case); root/<split>
// is used when root has train/ or val/. Throws input_error for a missing root or no images.
std::shared_ptr<const dataset> read_image_folder(const std::filesystem::path& root, const std::string& split);
std::shared_ptr<const dataset> make_synthetic(std::int64_t count, int side, int channels, int classes,
                                              std::uint64_t seed);

// Writes dead-leaves JPEGs (natural-image statistics) as dir/train/<class>/ (per_class each) and
// dir/val/<class>/ (a tenth of that, at least one), plus dir/GENERATED. The folder must be new or empty.
struct generated_folder {
  std::int64_t files = 0, grayscale = 0, progressive = 0;
  int threads = 1, val_per_class = 0;
  double mean_bytes = 0, mean_width = 0, mean_height = 0;
};
generated_folder write_image_folder(const std::filesystem::path& dir, int classes, int per_class, std::uint64_t seed);

// Writes random images and labels in the official CIFAR-10 binary layout.
void write_cifar10(const std::filesystem::path& dir, std::int64_t train_samples, std::int64_t test_samples,
                   std::uint64_t seed);

}  // namespace trainbench
