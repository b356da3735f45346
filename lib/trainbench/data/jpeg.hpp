#pragma once
// Host JPEG decoding with libjpeg-turbo, decoding only what a crop needs: DCT-domain scaling
// (1/2, 1/4, 1/8), jpeg_crop_scanline for columns, jpeg_skip_scanlines for rows above the crop,
// and nothing at all below it. One decoder per loader worker; its buffers are reused.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainbench/data/jpeg_markers.hpp"

namespace trainbench {

// A file that cannot be used as an image (not a JPEG, truncated, corrupt, too large, ...).
class bad_image : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct jpeg_info {
  int width = 0, height = 0;
  int channels = 0;  // of the decoded pixels: 1 (grayscale) or 3 (RGB; CMYK is converted)
  bool progressive = false;
};

// Rows [y0, y1) and columns [x0, x1) of the image scaled by 1/scale (scale 1, 2, 4 or 8),
// in scaled pixels.
struct jpeg_region {
  int scale = 1;
  int x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

// What decode() wrote: `rows` rows of `width` pixels of `channels` bytes, row-major, `stride`
// bytes apart, starting at scaled column x0 (x0 may be left of the region's: libjpeg crops on
// iMCU boundaries). Colour images (RGB and CMYK files alike) come as RGB (channels 3), grayscale
// as one byte a pixel.
struct decoded_pixels {
  const std::uint8_t* data = nullptr;
  int x0 = 0, y0 = 0, width = 0, rows = 0, channels = 0;
  std::size_t stride = 0;
};

// The pixels as packed RGB rows, px.width x 3 bytes each, back to back: grayscale repeated in each
// channel, as torchvision's RGB mode and PIL's convert("RGB") do.
void packed_rgb(const decoded_pixels& px, std::uint8_t* out);

class jpeg_decoder {
 public:
  jpeg_decoder();
  ~jpeg_decoder();
  jpeg_decoder(const jpeg_decoder&) = delete;
  jpeg_decoder& operator=(const jpeg_decoder&) = delete;

  // Reads the header of a whole file in memory, after walking its markers to the end-of-image
  // marker (what follows it is ignored). Throws bad_image; refuses more than max_pixels
  // before anything the size of the image is allocated.
  jpeg_info open(const std::uint8_t* data, std::size_t size, std::int64_t max_pixels);
  // Decodes a region of the opened image. libjpeg's warnings are not errors, as for torchvision
  // and PIL: a file's verdict must not depend on which rows its crop decodes.
  // The pixels stay valid until the next open().
  decoded_pixels decode(const jpeg_region& region);
  // What the marker walker found in the file open() last accepted: its frame, and `end`, the
  // length of the image without what follows its end-of-image marker.
  const jpeg_markers& markers() const { return markers_; }
  // The dimensions libjpeg gives the image at 1/scale (ceil(size / scale)).
  static int scaled(int size, int scale) { return (size + scale - 1) / scale; }

 private:
  struct state;
  std::unique_ptr<state> s_;
  std::vector<std::uint8_t> pixels_, row_;
  jpeg_markers markers_;
};

// Encodes RGB or grayscale pixels (used by make-dataset and the tests).
struct jpeg_encode_options {
  int quality = 90;
  bool progressive = false;
  // With progressive: a DC scan, then each component's AC coefficients with their lowest bit
  // dropped and never refined, as some encoders write them. libjpeg smooths such blocks from
  // their neighbours (block smoothing), which a cropped decode must reproduce at its edge.
  bool unrefined = false;
  bool subsample_420 = true;  // 4:2:0 chroma, libjpeg's default
};
std::vector<std::uint8_t> encode_jpeg(const std::uint8_t* pixels, int width, int height, int channels,
                                      const jpeg_encode_options& options);

}  // namespace trainbench
