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
std::shared_ptr<const dataset> make_synthetic(std::int64_t count, int side, int channels, int classes,
                                              std::uint64_t seed);

// Writes random images and labels in the official CIFAR-10 binary layout.
void write_cifar10(const std::filesystem::path& dir, std::int64_t train_samples, std::int64_t test_samples,
                   std::uint64_t seed);

}  // namespace trainbench
