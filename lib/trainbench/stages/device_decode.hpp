#pragma once
// data.decode: device: the decisions of the nvJPEG stage that need no GPU (no torch, no CUDA
// here), so CPU hosts test them: which nvJPEG statuses mean "this file, not the run", which files
// go to the host decoder before nvJPEG sees them, and how much pixel memory the stage keeps.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace trainbench {

// What a status from an nvJPEG decode call means for the run.
enum class nvjpeg_outcome {
  decoded,         // NVJPEG_STATUS_SUCCESS
  cannot_decode,   // this bitstream only (unsupported coding, bad or truncated data): the host decodes it
  fatal,           // the device, the library or our use of it failed: a run error
};
// Takes the numeric nvjpegStatus_t (the CUDA file checks the values match nvjpeg.h).
nvjpeg_outcome classify_nvjpeg_status(int status);
const char* nvjpeg_status_name(int status);

// True for a JPEG whose frame header is arithmetic-coded (SOF9-11, SOF13-15): nvJPEG decodes only
// Huffman-coded files, libjpeg-turbo decodes both. Reads markers up to the first SOF or SOS.
bool jpeg_is_arithmetic_coded(const std::uint8_t* data, std::size_t size);

// Where each image of a batch lands in the one pixel arena: its own region, aligned, never shared
// with another image of the batch (the hardware engines may write them in any order).
struct arena_layout {
  std::vector<std::int64_t> offsets;
  std::int64_t total = 0;
};
constexpr std::int64_t arena_alignment = 256;
arena_layout layout_arena(const std::vector<std::int64_t>& image_bytes);

// How large the pixel arena is kept. It grows to a batch's need at once; it shrinks to the largest
// need of the last `window` batches when it holds more than `slack` times that, so one batch of
// large photos is not kept for the rest of the run (per-index buffers would tend to batch size x
// the largest image).
class arena_sizer {
 public:
  explicit arena_sizer(std::size_t window = 16, double slack = 2.0) : window_(window), slack_(slack) {}
  // The capacity to hold for a batch that needs `needed` bytes when `held` are held now.
  std::int64_t capacity_for(std::int64_t needed, std::int64_t held);

 private:
  std::size_t window_;
  double slack_;
  std::deque<std::int64_t> recent_;
};

// What the stage has done so far; the runner takes differences over each window.
struct device_decode_counts {
  std::int64_t images_device = 0;   // decoded by nvJPEG
  std::int64_t host_fallbacks = 0;  // decoded by libjpeg-turbo on the host, then copied up
  std::int64_t replaced_samples = 0;  // bad files (data.on_bad_file: skip) replaced within the batch
  std::int64_t bytes_held = 0;      // pixel arena now
  std::int64_t peak_bytes_held = 0;
};

}  // namespace trainbench
