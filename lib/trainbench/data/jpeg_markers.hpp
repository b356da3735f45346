#pragma once
// The one JPEG marker walker. Host decoding (data/jpeg.cpp) checks a file with it before
// libjpeg-turbo reads it and hands libjpeg only the bytes up to the end-of-image marker; the
// device path (data.decode: device) chooses a decoder from what it finds and sends nvJPEG the
// same bytes, never what follows them (a Motion Photo's video). No libjpeg, no torch here.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace trainbench {

// The coding process of the frame marker (SOFn).
enum class jpeg_process {
  none,         // no frame marker met
  baseline,     // SOF0: 8-bit Huffman, sequential
  extended,     // SOF1 (and SOF9 with arithmetic): sequential, 8 or 12 bit
  progressive,  // SOF2 (SOF10 arithmetic)
  lossless,     // SOF3 (SOF11 arithmetic)
  hierarchical  // SOF5-7, SOF13-15 (differential frames)
};
const char* process_name(jpeg_process p);

struct jpeg_component {
  int id = 0, h = 0, v = 0;  // sampling factors, 1..4
};

// What the markers of one file say, as libjpeg's marker reader meets them from SOI to EOI.
struct jpeg_markers {
  std::uint8_t frame_marker = 0;  // 0xC0..0xCF, 0: none
  jpeg_process process = jpeg_process::none;
  bool arithmetic = false;  // SOF9-11, SOF13-15
  int precision = 0, width = 0, height = 0;
  int components = 0;
  std::array<jpeg_component, 4> component{};  // the first min(components, 4)
  int scans = 0;
  bool adobe = false;         // an APP14 "Adobe" segment
  int adobe_transform = -1;   // its transform flag: 0 none (RGB or CMYK), 1 YCbCr, 2 YCCK; -1 without one
  bool jfif = false;          // an APP0 "JFIF" segment (JFIF files are YCbCr)
  std::size_t end = 0;        // just past the end-of-image marker; 0: none, the file is cut short
  std::string refused;        // what libjpeg would refuse on reading to the end, if anything

  // Four components (CMYK or YCCK): libjpeg-turbo converts these as torchvision does.
  bool cmyk() const { return components == 4; }
  bool grayscale() const { return components == 1; }
  // Three components coded as R, G, B rather than Y, Cb, Cr, as libjpeg decides it
  // (default_decompress_parms): no JFIF segment, and an Adobe segment with transform 0, or without
  // one the component ids 'R', 'G', 'B'. libjpeg-turbo then converts no colour; nvJPEG documents
  // three components as YCbCr only, so such files are not sent to it.
  bool rgb_coded() const;
  // "4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1", "4:1:0", "gray", or "other" (the chroma
  // components' factors differ, or more than 3 components); from the factors of a 3-component
  // frame whose chroma factors are 1x1.
  std::string subsampling() const;
  // Complete and nothing a decoder would refuse.
  bool ok() const { return refused.empty() && end != 0 && frame_marker != 0; }
  // What the GPU's JPEG engines decode, by the markers alone: complete, baseline (SOF0: 8-bit
  // Huffman, sequential), in 4:2:0, 4:4:4, 4:2:2 or grayscale, and not rgb_coded().
  // nvjpegDecodeBatchedSupported may still refuse such a file on a given GPU (its size, say).
  bool engine_kind() const;
};

// Walks the markers of `data` (which must start with SOI; otherwise `refused` says so). Never
// reads past `size`; what follows the end-of-image marker is never looked at.
jpeg_markers read_jpeg_markers(const std::uint8_t* data, std::size_t size);

}  // namespace trainbench
