#pragma once
// One image-folder sample, file to normalised tensor, in a loader worker: read the bytes, parse
// the header, draw the crop, decode only what it needs, resize, normalise into the batch slot.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/data/crop.hpp"
#include "trainbench/data/dataset.hpp"
#include "trainbench/data/fused_crop.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/load_timing.hpp"

namespace trainbench {

struct folder_options {
  int image_size = 224;
  data_transform transform = data_transform::train;
  bool channels_last = false;
  std::vector<double> mean{0.485, 0.456, 0.406}, std{0.229, 0.224, 0.225};
  std::int64_t max_image_pixels = 89478485;
  std::int64_t max_image_bytes = 256 << 20;  // larger files are bad files, refused before reading
  bool skip_bad_files = false;  // data.on_bad_file: skip
  bool partial_decode = true;   // DCT scaling and cropping; false: every file decoded whole
  // Encoded batches (data.decode: device) with data.decode_off_engines: host: a file the GPU's JPEG
  // engines cannot take (jpeg_markers::engine_kind) is decoded here, its crop's region only.
  bool decode_off_engines = false;
  // With decode_off_engines: the share of each batch's positions offered to the device
  // (data.device_decode_share, offered_to_device); the workers decode the others too.
  double device_share = 1.0;
  std::uint64_t seed = 0;
};

// data.device_decode_share: whether position `position` of a batch is offered to the device's
// decoder. The offered positions are spread through the batch: of positions 0 to n-1, exactly
// floor(n * share) are, the share taken to six decimals (integer arithmetic, so every worker and
// every run splits a batch alike). 1 offers every position, 0 none.
inline bool offered_to_device(std::int64_t position, double share) {
  if (share >= 1) return true;
  if (share <= 0) return false;
  constexpr std::int64_t million = 1000000;
  const auto parts = static_cast<std::int64_t>(share * million + 0.5);
  return (position + 1) * parts / million > position * parts / million;
}

struct skipped_file {
  std::string path, reason;
};

// Files found bad, shared by the workers: each is logged once, every replaced sample counted.
class bad_files {
 public:
  explicit bad_files(std::int64_t size);
  bool known(std::int64_t index) const {
    return flags_[static_cast<std::size_t>(index)].load(std::memory_order_relaxed);
  }
  void add(std::int64_t index, const std::string& path, const std::string& reason);
  void count_replacement() { replacements_.fetch_add(1, std::memory_order_relaxed); }
  std::vector<skipped_file> files() const;
  std::int64_t replacements() const { return replacements_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<std::atomic<bool>[]> flags_;
  mutable std::mutex mutex_;
  std::vector<skipped_file> files_;
  std::atomic<std::int64_t> replacements_{0};
};

// data.decode: device with decode_off_engines: files the device found its JPEG engines refuse
// although their markers allowed them (nvjpegDecodeBatchedSupported said no, or nvJPEG could not
// decode them). The workers decode them from their next read on, as they do the files the markers
// rule out, instead of nvJPEG's general backend or libjpeg-turbo on the training thread.
class engine_refusals {
 public:
  explicit engine_refusals(std::int64_t size);
  bool known(std::int64_t index) const {
    return flags_[static_cast<std::size_t>(index)].load(std::memory_order_relaxed);
  }
  bool add(std::int64_t index);  // true the first time
  std::int64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::unique_ptr<std::atomic<bool>[]> flags_;
  std::atomic<std::int64_t> count_{0};
};

// data.decode: device. A batch of undecoded files with each one's crop, planned on the host with
// the same sampler as host decoding (so both give the same crops), decoded on the GPU later;
// with folder_options::decode_off_engines, files the JPEG engines cannot take come decoded.
struct encoded_batch {
  // The images back to back, each up to its end-of-image marker (what follows, such as a Motion
  // Photo's video, is left out), or the pixels a worker decoded (`decoded`); capacity kept
  // between batches.
  std::vector<std::uint8_t> bytes;
  std::vector<std::size_t> offsets, sizes;
  // Per image: width 0 where its bytes are the file; else the region of the file its bytes hold
  // as packed RGB rows, width x 3 bytes each, in the pixels of the image at the DCT scale the
  // worker decoded it at (its plan's coordinates).
  std::vector<plan_region> decoded;
  std::vector<jpeg_info> infos;
  std::vector<jpeg_markers> markers;  // each image's frame, as the marker walker read it
  // Each image's crop plan, in the coordinates of the file, or of a worker's pixels where
  // `decoded` is set (decoded at a DCT scale, the plan is scaled as they are).
  std::vector<resize_plan> plans;
  std::vector<std::int64_t> indices;  // dataset index of each file (for error messages)
  // The same bytes in the loader's file ring (pinned memory with data.pin_memory), or null: then
  // the consumer reads `bytes`.
  const std::uint8_t* ring = nullptr;
  const std::uint8_t* data() const { return ring ? ring : bytes.data(); }
  void clear();
};

// What one decode did, for the tests and the benchmark.
struct decode_facts {
  int scale = 1;
  jpeg_region region;
  jpeg_info info;
  crop_box box;
  bool flip = false;
};

class folder_reader {
 public:
  // `refused`: with decode_off_engines, the files to decode here whatever their markers say (may be null).
  folder_reader(const file_list& files, const folder_options& options, bad_files& bad,
                const engine_refusals* refused = nullptr);
  ~folder_reader();
  folder_reader(const folder_reader&) = delete;
  folder_reader& operator=(const folder_reader&) = delete;
  // Writes sample `index` of `epoch` into dst (3 x S x S floats, or S x S x 3 with channels_last)
  // and returns its label. A bad file is an input_error naming it, or with skip_bad_files the
  // next good file (in index order) takes its place, cropped and flipped by the sample's own draw.
  int read(std::int64_t index, std::int64_t epoch, float* dst, phase_marker& marks);
  // data.decode: device: reads and checks sample `index` (header only) and appends it and its
  // crop to `out`. Bad files are handled as by read(). `offered`: false at the positions
  // offered_to_device leaves to the workers: with decode_off_engines the file is decoded here.
  int read_encoded(std::int64_t index, std::int64_t epoch, encoded_batch& out, phase_marker& marks,
                   bool offered = true);
  const decode_facts& last() const { return last_; }

 private:
  void load_file(std::int64_t index);
  // `file` is the one read; `sample` (its own index, or the bad file's it replaces) seeds the crop.
  void transform(std::int64_t file, std::int64_t sample, std::int64_t epoch, float* dst, phase_marker& marks);
  void encode(std::int64_t file, std::int64_t sample, std::int64_t epoch, encoded_batch& out, phase_marker& marks,
              bool offered);
  plan_region decode_for_device(const resize_plan& plan, const jpeg_info& info, encoded_batch& out,
                                resize_plan& shipped);
  resize_plan plan_for(const jpeg_info& info, std::int64_t sample, std::int64_t epoch);
  template <class F>
  int with_good_file(std::int64_t index, F&& work);

  const file_list& files_;
  folder_options options_;
  bad_files& bad_;
  const engine_refusals* refused_;
  jpeg_decoder decoder_;
  crop_resampler resampler_;
  normalizer normalize_;
  std::vector<std::uint8_t> bytes_;
  std::size_t size_ = 0;
  decode_facts last_;
  int root_fd_ = -1;
};

}  // namespace trainbench
