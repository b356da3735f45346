// libjpeg reports errors by calling error_exit, which must not return: we longjmp back to the
// setjmp in the function that called into libjpeg (no C++ object lives between the two), then
// throw from there. Only C frames are ever skipped.
#include "trainbench/data/jpeg.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "trainbench/data/jpeg_markers.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

struct error_state {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<error_state*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings never refuse a file. torchvision's decode_jpeg and PIL decode through all of them
// (damaged entropy-coded data becomes made-up pixels there too); and a warning from rows below a
// crop is never met, so refusing on one would make a file's verdict depend on its crop. Only
// running out of data is fatal, as it is for both (open() has found the end marker, so it
// should not happen).
void on_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);
}

// torchvision's conversion (decode_jpeg with ImageReadMode.RGB), PIL's too: the values are taken
// as Adobe-inverted (0 is full ink), as Photoshop writes them, whether or not the file has an
// Adobe marker, since both assume that; k * c / 255 is rounded as they round it.
std::uint8_t cmyk_channel(int cmy, int k) {
  int v = k * (255 - cmy) + 128;
  v = ((v >> 8) + v) >> 8;  // k * (255 - cmy) / 255, rounded
  return static_cast<std::uint8_t>(k - v);
}

// In place into the RGB layout of the other colour images (each pixel's three bytes land at or
// before its four).
void cmyk_to_rgb(std::uint8_t* row, int width) {
  for (int x = 0; x < width; ++x) {
    const std::uint8_t* p = row + 4 * x;
    const int c = p[0], m = p[1], y = p[2], k = p[3];
    std::uint8_t* q = row + 3 * x;
    q[0] = cmyk_channel(c, k);
    q[1] = cmyk_channel(m, k);
    q[2] = cmyk_channel(y, k);
  }
}

// The markers' verdict (data/jpeg_markers.cpp), kept in `out`: the file is refused, or ends
// just past its end-of-image marker. Not inlined into open(): its locals would share a frame
// with open()'s setjmp.
[[gnu::noinline]] std::size_t check_markers(const std::uint8_t* data, std::size_t size, jpeg_markers& out) {
  out = read_jpeg_markers(data, size);
  if (!out.refused.empty()) throw bad_image(out.refused);
  if (out.end == 0) throw bad_image("truncated JPEG (no end-of-image marker)");
  return out.end;
}

}  // namespace

struct jpeg_decoder::state {
  jpeg_decompress_struct cinfo;
  error_state err;
  bool cmyk = false;
};

jpeg_decoder::jpeg_decoder() : s_(std::make_unique<state>()) {
  s_->cinfo.err = jpeg_std_error(&s_->err.pub);
  s_->err.pub.error_exit = on_error;
  s_->err.pub.emit_message = on_message;
  if (setjmp(s_->err.jump)) throw run_error("jpeg", std::string("libjpeg: ") + s_->err.message);
  jpeg_create_decompress(&s_->cinfo);
}

jpeg_decoder::~jpeg_decoder() { jpeg_destroy_decompress(&s_->cinfo); }

jpeg_info jpeg_decoder::open(const std::uint8_t* data, std::size_t size, std::int64_t max_pixels) {
  jpeg_decompress_struct& c = s_->cinfo;
  jpeg_abort_decompress(&c);  // frees the last image's memory, keeps the decoder
  markers_ = jpeg_markers{};
  if (size == 0) throw bad_image("empty file (0 bytes)");
  if (size < 4 || data[0] != 0xFF || data[1] != 0xD8) {
    char head[64];
    std::snprintf(head, sizeof head, "not a JPEG file (starts with 0x%02x 0x%02x, expected 0xff 0xd8)", data[0],
                  size > 1 ? data[1] : 0);
    throw bad_image(head);
  }
  const std::size_t end = check_markers(data, size, markers_);
  if (setjmp(s_->err.jump)) {
    jpeg_abort_decompress(&c);
    throw bad_image(s_->err.message);
  }
  jpeg_mem_src(&c, data, static_cast<unsigned long>(end));  // nothing after the image reaches libjpeg
  jpeg_read_header(&c, TRUE);
  const std::int64_t pixels = static_cast<std::int64_t>(c.image_width) * c.image_height;
  if (pixels > max_pixels) {
    jpeg_abort_decompress(&c);
    throw bad_image("header says " + std::to_string(c.image_width) + " x " + std::to_string(c.image_height) + " = " +
                    std::to_string(pixels) + " pixels, more than data.max_image_pixels (" + std::to_string(max_pixels) +
                    "); refused before decoding");
  }
  jpeg_info info;
  info.width = static_cast<int>(c.image_width);
  info.height = static_cast<int>(c.image_height);
  info.progressive = c.progressive_mode != 0;
  s_->cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  if (c.jpeg_color_space == JCS_GRAYSCALE) {
    c.out_color_space = JCS_GRAYSCALE;
    info.channels = 1;
  } else {
    c.out_color_space = s_->cmyk ? JCS_CMYK : JCS_RGB;
    info.channels = 3;
  }
  return info;
}

void packed_rgb(const decoded_pixels& px, std::uint8_t* out) {
  const std::size_t row = static_cast<std::size_t>(px.width) * 3;
  for (int y = 0; y < px.rows; ++y) {
    const std::uint8_t* from = px.data + static_cast<std::size_t>(y) * px.stride;
    std::uint8_t* to = out + static_cast<std::size_t>(y) * row;
    if (px.channels == 3) {
      std::memcpy(to, from, row);
      continue;
    }
    for (int x = 0; x < px.width; ++x) to[3 * x] = to[3 * x + 1] = to[3 * x + 2] = from[x];
  }
}

decoded_pixels jpeg_decoder::decode(const jpeg_region& r) {
  jpeg_decompress_struct& c = s_->cinfo;
  TB_ASSERT(r.scale == 1 || r.scale == 2 || r.scale == 4 || r.scale == 8, "DCT scaling is 1/1, 1/2, 1/4 or 1/8");
  TB_ASSERT(r.x0 >= 0 && r.x1 > r.x0 && r.y0 >= 0 && r.y1 > r.y0, "empty decode region");
  if (setjmp(s_->err.jump)) {
    jpeg_abort_decompress(&c);
    throw bad_image(s_->err.message);
  }
  c.scale_num = 1;
  c.scale_denom = static_cast<unsigned>(r.scale);
  c.dct_method = JDCT_ISLOW;  // libjpeg's default, as torchvision and PIL decode
  jpeg_start_decompress(&c);
  TB_ASSERT(static_cast<int>(c.output_width) >= r.x1 && static_cast<int>(c.output_height) >= r.y1,
            "decode region outside the scaled image");
  // libjpeg treats the cropped edges as the image's: its fancy upsampling of subsampled chroma
  // (a triangle over the neighbouring chroma sample) then differs in the edge columns, and in a
  // progressive file with coefficients never refined, its block smoothing takes the missing left
  // neighbours of the crop's first two block columns from the blocks themselves. Two columns each
  // side, and two more iMCUs on the left of a progressive file, keep every requested column equal
  // to a full decode's (libjpeg widens the left edge to an iMCU boundary itself); the test checks
  // edges at every phase of the iMCU, with a file libjpeg smooths.
#if JPEG_LIB_VERSION >= 70
  const int block = c.min_DCT_h_scaled_size;
#else
  const int block = c.min_DCT_scaled_size;
#endif
  const int margin = 2, smoothing = c.progressive_mode ? 2 * block * c.max_h_samp_factor : 0;
  const int left = std::max(0, r.x0 - margin - smoothing);
  const int right = std::min(static_cast<int>(c.output_width), r.x1 + margin);
  JDIMENSION x0 = static_cast<JDIMENSION>(left), width = static_cast<JDIMENSION>(right - left);
  if (x0 > 0 || width < c.output_width) jpeg_crop_scanline(&c, &x0, &width);
  const int comps = c.output_components;
  decoded_pixels out;
  out.x0 = static_cast<int>(x0);
  out.y0 = r.y0;
  out.width = static_cast<int>(width);
  out.rows = r.y1 - r.y0;
  out.channels = s_->cmyk ? 3 : comps;
  out.stride = static_cast<std::size_t>(width) * comps;
  const std::size_t bytes = out.stride * out.rows;
  if (pixels_.size() < bytes) pixels_.resize(bytes);  // grows to the largest region, then reused
  if (r.y0 > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(r.y0));
  while (static_cast<int>(c.output_scanline) < r.y1) {
    JSAMPROW rows[16];
    const int first = static_cast<int>(c.output_scanline);
    const int n = std::min(16, r.y1 - first);
    for (int i = 0; i < n; ++i) rows[i] = pixels_.data() + out.stride * (first - r.y0 + i);
    jpeg_read_scanlines(&c, rows, static_cast<JDIMENSION>(n));
  }
  // Rows below the crop are never decoded, and a whole image is not finished either: what
  // jpeg_finish_decompress would read after the last row, open() has checked for every crop.
  jpeg_abort_decompress(&c);
  if (s_->cmyk)
    for (int y = 0; y < out.rows; ++y) cmyk_to_rgb(pixels_.data() + out.stride * y, out.width);
  out.data = pixels_.data();
  return out;
}

namespace {

struct compress_guard {
  jpeg_compress_struct c{};
  error_state err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  ~compress_guard() {
    jpeg_destroy_compress(&c);
    std::free(buffer);
  }
};

}  // namespace

std::vector<std::uint8_t> encode_jpeg(const std::uint8_t* pixels, int width, int height, int channels,
                                      const jpeg_encode_options& o) {
  TB_ASSERT(channels == 1 || channels == 3, "encode_jpeg takes grayscale or RGB");
  compress_guard g;
  g.c.err = jpeg_std_error(&g.err.pub);
  g.err.pub.error_exit = on_error;
  if (setjmp(g.err.jump)) throw run_error("jpeg", std::string("libjpeg (encoding): ") + g.err.message);
  jpeg_create_compress(&g.c);
  jpeg_mem_dest(&g.c, &g.buffer, &g.size);
  g.c.image_width = static_cast<JDIMENSION>(width);
  g.c.image_height = static_cast<JDIMENSION>(height);
  g.c.input_components = channels;
  g.c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&g.c);
  jpeg_set_quality(&g.c, o.quality, TRUE);
  if (channels == 3 && !o.subsample_420) {
    for (int i = 0; i < 3; ++i) g.c.comp_info[i].h_samp_factor = g.c.comp_info[i].v_samp_factor = 1;
  }
  if (o.progressive) jpeg_simple_progression(&g.c);
  jpeg_scan_info scans[4] = {};
  if (o.progressive && o.unrefined) {
    scans[0].comps_in_scan = channels;
    for (int i = 0; i < channels; ++i) scans[0].component_index[i] = i;  // DC, Ss = Se = Ah = Al = 0
    for (int i = 0; i < channels; ++i) scans[1 + i] = {1, {i, 0, 0, 0}, 1, 63, 0, 1};
    g.c.scan_info = scans;
    g.c.num_scans = 1 + channels;
  }
  jpeg_start_compress(&g.c, TRUE);
  const std::size_t stride = static_cast<std::size_t>(width) * channels;
  while (g.c.next_scanline < g.c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + stride * g.c.next_scanline);
    jpeg_write_scanlines(&g.c, &row, 1);
  }
  jpeg_finish_compress(&g.c);
  return std::vector<std::uint8_t>(g.buffer, g.buffer + g.size);
}

}  // namespace trainbench
