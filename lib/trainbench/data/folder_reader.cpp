#include "trainbench/data/folder_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"

namespace trainbench {

bad_files::bad_files(std::int64_t size) : flags_(new std::atomic<bool>[static_cast<std::size_t>(size)]) {
  for (std::int64_t i = 0; i < size; ++i) flags_[static_cast<std::size_t>(i)].store(false);
}

void bad_files::add(std::int64_t index, const std::string& path, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (flags_[static_cast<std::size_t>(index)].exchange(true)) return;  // another worker was first
  files_.push_back({path, reason});
  log_warn("data.on_bad_file: skip: skipped " + path + ": " + reason);
}

std::vector<skipped_file> bad_files::files() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return files_;
}

engine_refusals::engine_refusals(std::int64_t size) : flags_(new std::atomic<bool>[static_cast<std::size_t>(size)]) {
  for (std::int64_t i = 0; i < size; ++i) flags_[static_cast<std::size_t>(i)].store(false);
}

bool engine_refusals::add(std::int64_t index) {
  if (flags_[static_cast<std::size_t>(index)].exchange(true)) return false;
  count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

folder_reader::folder_reader(const file_list& files, const folder_options& options, bad_files& bad,
                             const engine_refusals* refused)
    : files_(files), options_(options), bad_(bad), refused_(refused), normalize_(options.mean, options.std) {
  root_fd_ = open(files_.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd_ < 0) throw input_error("image folder '" + files_.root.string() + "': " + std::strerror(errno));
}

folder_reader::~folder_reader() { close(root_fd_); }

namespace {
struct file_guard {
  int fd;
  ~file_guard() { close(fd); }
};

std::string too_large(std::int64_t bytes, std::int64_t limit) {
  return "file is " + std::to_string(bytes) + " bytes, more than data.max_image_bytes (" + std::to_string(limit) +
         "); refused unread";
}

}  // namespace

// The whole file into a buffer that only ever grows (ImageNet's files are ~110 KB), up to
// data.max_image_bytes: a multi-GB file named .jpg must be a bad file, not a failed allocation.
void folder_reader::load_file(std::int64_t index) {
  const int fd = openat(root_fd_, files_.relative(index), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw bad_image(std::string("cannot open: ") + std::strerror(errno));
  file_guard guard{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) throw bad_image(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw bad_image("not a regular file");
  const std::int64_t limit = options_.max_image_bytes;
  if (st.st_size > limit) throw bad_image(too_large(st.st_size, limit));
  const auto expected = static_cast<std::size_t>(st.st_size);
  if (bytes_.size() < expected + 1) bytes_.resize(expected + 1);
  size_ = 0;
  // Read to the end even if the file grew since fstat: one byte of room tells.
  while (true) {
    if (size_ == bytes_.size())
      bytes_.resize(static_cast<std::size_t>(std::min<std::int64_t>(2 * static_cast<std::int64_t>(size_), limit + 1)));
    const ssize_t n = ::read(fd, bytes_.data() + size_, bytes_.size() - size_);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw bad_image(std::string("cannot read: ") + std::strerror(errno));
    }
    if (n == 0) break;
    size_ += static_cast<std::size_t>(n);
    if (static_cast<std::int64_t>(size_) > limit)
      throw bad_image("file grew past data.max_image_bytes (" + std::to_string(limit) + ") while read");
  }
}

void encoded_batch::clear() {
  bytes.clear();
  offsets.clear();
  sizes.clear();
  decoded.clear();
  infos.clear();
  markers.clear();
  plans.clear();
  ring = nullptr;
  indices.clear();
}

// The draw belongs to the sample, not the file: a replacement for a skipped file must not repeat
// the crop and flip its file gets as its own sample in the same epoch.
resize_plan folder_reader::plan_for(const jpeg_info& info, std::int64_t sample, std::int64_t epoch) {
  decode_facts& f = last_;
  f.info = info;
  if (options_.transform == data_transform::eval) {
    f.box = {};
    f.flip = false;
    return eval_plan(info.height, info.width, options_.image_size);
  }
  sample_rng rng(options_.seed, epoch, sample);
  f.box = random_resized_crop(info.height, info.width, rng);
  f.flip = rng.uniform(0.0, 1.0) < 0.5;
  return train_plan(f.box, options_.image_size, f.flip);
}

void folder_reader::transform(std::int64_t file, std::int64_t sample, std::int64_t epoch, float* dst,
                              phase_marker& marks) {
  marks.begin(load_phase::read);
  load_file(file);
  marks.begin(load_phase::decode);
  const jpeg_info info = decoder_.open(bytes_.data(), size_, options_.max_image_pixels);
  const int s = options_.image_size;
  const resize_plan plan = plan_for(info, sample, epoch);
  decode_facts& f = last_;
  f.scale = options_.partial_decode ? dct_scale(plan) : 1;
  f.region = resampler_.prepare(plan, f.scale, info.height, info.width, s);
  if (!options_.partial_decode) f.region = {1, 0, info.width, 0, info.height};
  const decoded_pixels px = decoder_.decode(f.region);
  marks.begin(load_phase::resize);
  resampler_.resample(px, normalize_, options_.channels_last, dst);
  marks.end();
}

void folder_reader::encode(std::int64_t file, std::int64_t sample, std::int64_t epoch, encoded_batch& out,
                           phase_marker& marks, bool offered) {
  marks.begin(load_phase::read);
  load_file(file);
  marks.begin(load_phase::decode);  // the header; the pixels only where the workers decode the file
  const jpeg_info info = decoder_.open(bytes_.data(), size_, options_.max_image_pixels);
  const resize_plan plan = plan_for(info, sample, epoch);
  const std::size_t at = out.bytes.size();
  plan_region decoded;
  resize_plan shipped = plan;
  const bool off_engines = !decoder_.markers().engine_kind() || (refused_ && refused_->known(file));
  if (options_.decode_off_engines && (off_engines || !offered)) {
    decoded = decode_for_device(plan, info, out, shipped);
  } else {
    // Only the image: the device must never be sent what follows its end-of-image marker.
    const std::size_t image = decoder_.markers().end;
    out.bytes.insert(out.bytes.end(), bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(image));
  }
  marks.end();
  out.offsets.push_back(at);
  out.sizes.push_back(out.bytes.size() - at);
  out.decoded.push_back(decoded);
  out.infos.push_back(info);
  out.markers.push_back(decoder_.markers());
  out.plans.push_back(shipped);
  out.indices.push_back(file);
}

// A file the workers decode for the device (one the JPEG engines cannot take, or at a position
// data.device_decode_share leaves them): libjpeg-turbo decodes its crop's region here (the whole
// image with partial_decode off) at the DCT scale the host path takes (dct_scale: 1/2, 1/4 or 1/8
// where the scaled crop still has the output's resolution), and appends the pixels to `out` as
// packed RGB. `shipped` becomes the plan in those pixels' coordinates (scaled_plan), so the device
// crops them as the host path's resampler does, by the same arithmetic as an engine's region
// (region_of: the same rectangle and shift, in scaled pixels). On the training thread, nvJPEG's
// general backend would decode the whole file, Huffman on the host, one image after another.
plan_region folder_reader::decode_for_device(const resize_plan& plan, const jpeg_info& info, encoded_batch& out,
                                             resize_plan& shipped) {
  const int scale = options_.partial_decode ? dct_scale(plan) : 1;
  shipped = scale > 1 ? scaled_plan(plan, scale, info.height, info.width) : plan;
  const int width = jpeg_decoder::scaled(info.width, scale), height = jpeg_decoder::scaled(info.height, scale);
  const plan_region want = options_.partial_decode ? region_of(shipped, width, height) : plan_region{0, 0, width, height};
  decode_facts& f = last_;
  f.scale = scale;
  f.region = {scale, want.x0, want.x0 + want.width, want.y0, want.y0 + want.height};
  const decoded_pixels px = decoder_.decode(f.region);  // x0 and width may widen to libjpeg's iMCU columns
  const std::size_t at = out.bytes.size();
  out.bytes.resize(at + static_cast<std::size_t>(px.width) * 3 * static_cast<std::size_t>(px.rows));
  packed_rgb(px, out.bytes.data() + at);
  return {px.x0, px.y0, px.width, px.rows};
}

// The sample's file, or with skip_bad_files the next good one after it (in index order).
template <class F>
int folder_reader::with_good_file(std::int64_t index, F&& work) {
  const std::int64_t n = files_.size();
  for (std::int64_t tried = 0; tried < n; ++tried) {
    const std::int64_t j = (index + tried) % n;
    if (bad_.known(j)) continue;
    try {
      work(j);
      if (tried > 0) bad_.count_replacement();
      return files_.labels[static_cast<std::size_t>(j)];
    } catch (const bad_image& e) {
      if (!options_.skip_bad_files)
        throw input_error(files_.path(j) + ": " + e.what() + " (data.on_bad_file: skip would skip such files)");
      bad_.add(j, files_.path(j), e.what());
    }
  }
  throw input_error("image folder '" + files_.root.string() + "': every file is unreadable (data.on_bad_file: skip)");
}

int folder_reader::read(std::int64_t index, std::int64_t epoch, float* dst, phase_marker& marks) {
  return with_good_file(index, [&](std::int64_t j) {
    try {
      transform(j, index, epoch, dst, marks);
    } catch (...) {
      marks.end();
      throw;
    }
  });
}

int folder_reader::read_encoded(std::int64_t index, std::int64_t epoch, encoded_batch& out, phase_marker& marks,
                                bool offered) {
  return with_good_file(index, [&](std::int64_t j) {
    try {
      encode(j, index, epoch, out, marks, offered);
    } catch (...) {
      marks.end();
      throw;
    }
  });
}

}  // namespace trainbench
