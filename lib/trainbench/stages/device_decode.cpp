#include "trainbench/stages/device_decode.hpp"

#include <algorithm>
#include <string>

namespace trainbench {

namespace {
struct status_row {
  int status;
  const char* name;
  nvjpeg_outcome outcome;
};
// Every nvjpegStatus_t value, explicitly. The table classifies what a per-image decode call
// returns (set-up calls fail the run on any status). Statuses about the bitstream, and
// IMPLEMENTATION_NOT_SUPPORTED (this backend lacks the image's layout), send the file on to the
// next decoder (hardware, then general, then the host); INVALID_PARAMETER, ALLOCATOR_FAILURE, EXECUTION_FAILED, INTERNAL_ERROR and the rest are ours or
// the device's, and hiding them would report a host-decoding run as a device one.
constexpr status_row status_table[] = {
    {0, "NVJPEG_STATUS_SUCCESS", nvjpeg_outcome::decoded},
    {1, "NVJPEG_STATUS_NOT_INITIALIZED", nvjpeg_outcome::fatal},
    {2, "NVJPEG_STATUS_INVALID_PARAMETER", nvjpeg_outcome::fatal},
    {3, "NVJPEG_STATUS_BAD_JPEG", nvjpeg_outcome::cannot_decode},
    {4, "NVJPEG_STATUS_JPEG_NOT_SUPPORTED", nvjpeg_outcome::cannot_decode},
    {5, "NVJPEG_STATUS_ALLOCATOR_FAILURE", nvjpeg_outcome::fatal},
    {6, "NVJPEG_STATUS_EXECUTION_FAILED", nvjpeg_outcome::fatal},
    {7, "NVJPEG_STATUS_ARCH_MISMATCH", nvjpeg_outcome::fatal},
    {8, "NVJPEG_STATUS_INTERNAL_ERROR", nvjpeg_outcome::fatal},
    {9, "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED", nvjpeg_outcome::cannot_decode},
    {10, "NVJPEG_STATUS_INCOMPLETE_BITSTREAM", nvjpeg_outcome::cannot_decode},
};

const status_row* find_status(int status) {
  for (const auto& row : status_table)
    if (row.status == status) return &row;
  return nullptr;
}
}  // namespace

nvjpeg_outcome classify_nvjpeg_status(int status) {
  const status_row* row = find_status(status);
  return row ? row->outcome : nvjpeg_outcome::fatal;  // a status newer than this table: not ours to hide
}

const char* nvjpeg_status_name(int status) {
  const status_row* row = find_status(status);
  return row ? row->name : "unknown nvjpegStatus_t";
}

const char* backend_name(decode_backend b) {
  switch (b) {
    case decode_backend::hardware:
      return "hardware";
    case decode_backend::cuda:
      return "cuda";
    case decode_backend::host:
      return "host";
  }
  return "?";
}

decode_backend choose_backend(const jpeg_markers& m, bool engines) {
  if (!m.ok() || m.arithmetic || m.precision != 8) return decode_backend::host;
  if (m.process == jpeg_process::lossless || m.process == jpeg_process::hierarchical) return decode_backend::host;
  if (m.components != 1 && m.components != 3) return decode_backend::host;
  if (m.rgb_coded()) return decode_backend::host;  // colours nvJPEG would convert as YCbCr
  if (engines && m.engine_kind()) return decode_backend::hardware;
  return decode_backend::cuda;
}

void layout_arena(const std::vector<std::int64_t>& image_bytes, arena_layout& out) {
  out.offsets.clear();
  out.total = 0;
  for (std::int64_t b : image_bytes) {
    out.offsets.push_back(out.total);
    out.total += (b + arena_alignment - 1) / arena_alignment * arena_alignment;
  }
}

arena_layout layout_arena(const std::vector<std::int64_t>& image_bytes) {
  arena_layout out;
  layout_arena(image_bytes, out);
  return out;
}

std::int64_t arena_sizer::capacity_for(std::int64_t needed, std::int64_t held) {
  recent_[seen_++ % recent_.size()] = needed;
  if (needed > held) return needed;
  const auto end = recent_.begin() + static_cast<std::ptrdiff_t>(std::min(seen_, recent_.size()));
  const std::int64_t typical = *std::max_element(recent_.begin(), end);
  if (static_cast<double>(held) > slack_ * static_cast<double>(typical)) return typical;
  return held;
}

// Within the last size_ batches recorded, b's own event still holds b (or a later batch, if one
// is recorded meanwhile: also proof); older, the next event to be reused holds the oldest batch.
std::size_t read_fence_slots::proof(std::int64_t b) const {
  const std::int64_t latest = latest_.load(std::memory_order_acquire);
  if (latest - b < static_cast<std::int64_t>(size_)) return slot_for(b);
  return slot_for(latest + 1);
}

}  // namespace trainbench
