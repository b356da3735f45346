#include "trainbench/data/dataset.hpp"

#include <random>

#include "trainbench/util/error.hpp"

namespace trainbench {

memory_dataset::memory_dataset(std::string description, int height, int width, int channels, int classes,
                               std::vector<std::uint8_t> pixels, std::vector<int> labels)
    : description_(std::move(description)),
      height_(height),
      width_(width),
      channels_(channels),
      classes_(classes),
      pixels_(std::move(pixels)),
      labels_(std::move(labels)) {
  // The readers bound the sides; in 64 bits these products cannot wrap then.
  TB_ASSERT(height > 0 && width > 0 && channels > 0 && height <= static_cast<int>(max_file_image_side) &&
                width <= static_cast<int>(max_file_image_side) && channels <= 4,
            "image shape out of the readers' bounds");
  const std::size_t stride = static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * channels;
  TB_ASSERT(pixels_.size() / stride == labels_.size() && pixels_.size() % stride == 0,
            "pixel buffer does not match the sample count");
}

sample_view memory_dataset::sample(std::int64_t index) const {
  const std::size_t stride = static_cast<std::size_t>(height_) * width_ * channels_;
  return {pixels_.data() + stride * static_cast<std::size_t>(index), labels_[static_cast<std::size_t>(index)]};
}

std::filesystem::path default_data_path(data_source source) {
  switch (source) {
    case data_source::cifar10:
      return "data/cifar-10-batches-bin";
    case data_source::fashion_mnist:
      return "/usr/share/datasets/fashion-mnist";
    case data_source::mnist:
      return "data/mnist";
    case data_source::imagefolder:
      return "data/imagenet";
    default:
      return {};
  }
}

std::shared_ptr<const dataset> make_synthetic(std::int64_t count, int side, int channels, int classes,
                                              std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(count) * side * side * channels);
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng() >> 56);
  std::vector<int> labels(static_cast<std::size_t>(count));
  for (auto& l : labels) l = static_cast<int>(rng() % static_cast<std::uint64_t>(classes));
  return std::make_shared<memory_dataset>("synthetic " + std::to_string(count) + " x " + std::to_string(side) + "x" +
                                              std::to_string(side) + "x" + std::to_string(channels),
                                          side, side, channels, classes, std::move(pixels), std::move(labels));
}

std::shared_ptr<const dataset> open_dataset(const data_config& cfg, int num_classes, std::uint64_t seed) {
  const std::filesystem::path dir = cfg.path.empty() ? default_data_path(cfg.source) : std::filesystem::path(cfg.path);
  std::shared_ptr<const dataset> ds;
  switch (cfg.source) {
    case data_source::cifar10:
      ds = read_cifar10(dir, cfg.split);
      break;
    case data_source::fashion_mnist:
      ds = read_idx(dir, cfg.split, "fashion-mnist");
      break;
    case data_source::mnist:
      ds = read_idx(dir, cfg.split, "mnist");
      break;
    case data_source::synthetic:
      ds = make_synthetic(cfg.samples, cfg.source_size, 3, num_classes, seed);
      break;
    case data_source::imagefolder:
      ds = read_image_folder(dir, cfg.split);
      if (ds->num_classes() != num_classes)
        throw input_error(ds->describe() + " has " + std::to_string(ds->num_classes()) +
                          " class folders but model.num_classes is " + std::to_string(num_classes) +
                          ": set model.num_classes: " + std::to_string(ds->num_classes()));
      break;
    case data_source::device_synthetic:
      TB_ASSERT(false, "device-synthetic has no host dataset");
  }
  if (ds->num_classes() > num_classes) {
    throw input_error(ds->describe() + " has " + std::to_string(ds->num_classes()) +
                      " classes but model.num_classes is " + std::to_string(num_classes) +
                      ": labels would be out of range");
  }
  return ds;
}

}  // namespace trainbench
