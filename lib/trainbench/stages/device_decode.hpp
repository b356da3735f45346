#pragma once
// data.decode: device: the decisions of the nvJPEG stage that need no GPU (no torch, no CUDA
// here), so CPU hosts test them: which nvJPEG statuses mean "this file, not the run", which files
// go to the host decoder before nvJPEG sees them, and how much pixel memory the stage keeps.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainbench/data/jpeg_markers.hpp"

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

// Which decoder an image of a batch is sent to, from its markers (data/jpeg_markers.hpp).
enum class decode_backend {
  hardware,  // nvJPEG's hardware backend: the GPU's JPEG engines (A100, H100, H200), batched
  cuda,      // nvJPEG's general backend (CUDA kernels, Huffman on the host for progressive files)
  host       // libjpeg-turbo on the host, then copied up
};
const char* backend_name(decode_backend b);

// The first choice for one file; nvJPEG may still refuse it at run time (the hardware backend's
// own check, nvjpegDecodeBatchedSupported, or a decode status), and then the next one down takes it.
// - hardware: baseline (SOF0, Huffman, 8-bit, one frame) in 4:2:0, 4:4:4, 4:2:2 or grayscale,
//   when `engines` (the hardware backend could be created on this GPU);
// - host: arithmetic coding, 12-bit, lossless or hierarchical frames (nvJPEG decodes none of them
//   the way the host does), and four components (CMYK and YCCK: the host converts them as
//   torchvision does, nvJPEG does not), three components coded as RGB (jpeg_markers::rgb_coded:
//   libjpeg converts no colour, nvJPEG reads three components as YCbCr), and files whose markers
//   are incomplete or refused;
// - cuda: the rest (progressive, extended sequential, other subsamplings).
decode_backend choose_backend(const jpeg_markers& markers, bool engines);

// Where each image of a batch lands in the one pixel arena: its own region, aligned, never shared
// with another image of the batch (the hardware engines may write them in any order).
struct arena_layout {
  std::vector<std::int64_t> offsets;
  std::int64_t total = 0;
};
constexpr std::int64_t arena_alignment = 256;
arena_layout layout_arena(const std::vector<std::int64_t>& image_bytes);
// The same into `out`, whose vector keeps its capacity (no allocation per batch).
void layout_arena(const std::vector<std::int64_t>& image_bytes, arena_layout& out);

// How large the pixel arena is kept. It grows to a batch's need at once; it shrinks to the largest
// need of the last `window` batches when it holds more than `slack` times that, so one batch of
// large photos is not kept for the rest of the run (per-index buffers would tend to batch size x
// the largest image).
class arena_sizer {
 public:
  explicit arena_sizer(std::size_t window = 16, double slack = 2.0)
      : recent_(std::max<std::size_t>(window, 1)), slack_(slack) {}
  // The capacity to hold for a batch that needs `needed` bytes when `held` are held now.
  std::int64_t capacity_for(std::int64_t needed, std::int64_t held);

 private:
  std::vector<std::int64_t> recent_;  // the last needs, used round (no allocation per batch)
  std::size_t seen_ = 0;
  double slack_;
};

// Which of `size` reusable device events proves that a batch's reads of its file bytes have run.
// Each submitted batch records the next event, round robin, on the decode stream after its last
// read; its file-ring block and its decode state are free once that has run. An event reused by a
// later batch of the same stream proves the earlier one too (the stream runs in order), so a batch
// whose own event was reused is proved by the oldest batch still held: never too early, late by as
// little as the pool allows, and no event or closure is made per batch. The training thread
// records; the loader's workers and the training thread wait.
class read_fence_slots {
 public:
  explicit read_fence_slots(std::size_t size) : size_(size) {}
  std::size_t size() const { return size_; }
  // The event batch `b` records in; batches are recorded one after another (0, 1, 2, ...).
  std::size_t slot_for(std::int64_t b) const { return static_cast<std::size_t>(b) % size_; }
  // After that event is recorded.
  void recorded(std::int64_t b) { latest_.store(b, std::memory_order_release); }
  // The event to wait on for batch `b`, which has been recorded.
  std::size_t proof(std::int64_t b) const;

 private:
  std::size_t size_;
  std::atomic<std::int64_t> latest_{-1};
};

// A batched call that the JPEG engines refuse says only that some image of it cannot be decoded
// there, not which. The caller's `decode(first, count)` decodes the images [first, first + count)
// of the refused call again in one call and says whether the engines took them. The range is
// halved down to single images; the images refused alone are appended to `refused` (found once,
// so later epochs route them elsewhere from the start), the others are decoded. A half is not
// tried when its sibling was taken (the range they share was refused), but an image is declared
// refused only once it has been refused alone: a refusal that does not come back isolates nothing.
// With r refused images of n, at most about r (2 log2(n) + 1) calls. `tried`: the range itself
// was refused (false: only inferred).
template <class Decode>
void isolate_refused(std::size_t first, std::size_t count, Decode&& decode, std::vector<std::size_t>& refused,
                     bool tried = true) {
  if (count == 0) return;
  if (count == 1) {
    if (tried || !decode(first, 1)) refused.push_back(first);
    return;
  }
  const std::size_t left = count / 2, right = count - left;
  if (decode(first, left)) {
    isolate_refused(first + left, right, decode, refused, false);
    return;
  }
  isolate_refused(first, left, decode, refused, true);
  if (!decode(first + left, right)) isolate_refused(first + left, right, decode, refused, true);
}

// What the stage has done so far; the runner takes differences over each window.
struct device_decode_counts {
  std::int64_t images_device = 0;    // decoded by nvJPEG: images_hardware + images_cuda
  std::int64_t images_hardware = 0;  // by the hardware backend (the JPEG engines)
  std::int64_t images_region = 0;    // of those, decoded as their crop's region only (smaller than the file)
  std::int64_t state_waits = 0;      // hardware calls that waited for a decode state (every one busy)
  std::int64_t hardware_refusals = 0;       // batched calls the engines refused whole (isolate_refused's retries too)
  std::int64_t hardware_refused_files = 0;  // files found refused alone: routed off the engines from then on
  std::int64_t arena_waits = 0;  // hardware calls whose host waited for their arena's last crops, or new arenas
  std::int64_t wait_ns = 0;      // host time in those waits and in state_waits' (part of hardware_ns)
  std::int64_t images_cuda = 0;      // by the general backend
  std::int64_t host_fallbacks = 0;  // decoded by libjpeg-turbo on the host, then copied up
  std::int64_t images_workers = 0;  // decoded by the loader's workers (data.decode_off_engines: host), copied up
  std::int64_t pageable_batches = 0;  // batches whose files were not in the pinned ring
  // Host time spent in submit, by phase (steady clock, as the loader's workers count theirs):
  // choosing, parsing and placing (route), the hardware batch call, the general backend's calls (its
  // Huffman decoding runs in them), host fallbacks (libjpeg-turbo and the copy) and the copies of
  // the workers' pixels, and launching the crops. What a GPU run needs to say where the training thread's time goes.
  std::int64_t route_ns = 0, hardware_ns = 0, cuda_ns = 0, fallback_ns = 0, crop_ns = 0;
  std::int64_t submit_ns() const { return route_ns + hardware_ns + cuda_ns + fallback_ns + crop_ns; }
  std::int64_t replaced_samples = 0;  // bad files (data.on_bad_file: skip) replaced within the batch
  std::int64_t bytes_held = 0;      // the two pixel arenas now
  std::int64_t peak_bytes_held = 0;
};

}  // namespace trainbench
