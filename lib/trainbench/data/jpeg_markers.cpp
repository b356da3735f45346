#include "trainbench/data/jpeg_markers.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace trainbench {

namespace {

bool is_frame(std::uint8_t m) { return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC; }

// Markers libjpeg reads without complaint besides frames, scans, SOI and EOI: tables, restart
// interval, DNL, APPn, COM, restarts and TEM. Any other stops it ("Unsupported marker type").
bool is_known(std::uint8_t m) {
  return m == 0xC4 || m == 0xCC || (m >= 0xDB && m <= 0xDD) || (m >= 0xE0 && m <= 0xEF) || m == 0xFE ||
         (m >= 0xD0 && m <= 0xD7) || m == 0x01;
}

jpeg_process process_of(std::uint8_t m) {
  switch (m & 0x03) {
    case 0:
      return (m & 0x04) ? jpeg_process::hierarchical : jpeg_process::baseline;
    case 1:
      return (m & 0x04) ? jpeg_process::hierarchical : jpeg_process::extended;
    case 2:
      return (m & 0x04) ? jpeg_process::hierarchical : jpeg_process::progressive;
    default:
      return (m & 0x04) ? jpeg_process::hierarchical : jpeg_process::lossless;
  }
}

// The frame header: P, Y, X, Nf, then Nf x (C, HV, Tq). `at` is just past the marker; the
// segment is known to lie within the file.
void read_frame(const std::uint8_t* d, std::size_t at, std::size_t length, std::uint8_t m, jpeg_markers& out) {
  out.frame_marker = m;
  out.arithmetic = m >= 0xC9;
  out.process = process_of(m);
  if (out.process == jpeg_process::baseline && out.arithmetic) out.process = jpeg_process::extended;  // SOF9
  if (length < 8) return;
  out.precision = d[at + 2];
  out.height = d[at + 3] << 8 | d[at + 4];
  out.width = d[at + 5] << 8 | d[at + 6];
  out.components = d[at + 7];
  const int listed = std::min<int>({out.components, 4, static_cast<int>((length - 8) / 3)});
  for (int k = 0; k < listed; ++k) {
    const std::size_t c = at + 8 + 3 * static_cast<std::size_t>(k);
    out.component[static_cast<std::size_t>(k)] = {d[c], d[c + 1] >> 4, d[c + 1] & 0x0F};
  }
}

// APP14 "Adobe": version (2), flags0 (2), flags1 (2), transform (1).
void read_adobe(const std::uint8_t* d, std::size_t at, std::size_t length, jpeg_markers& out) {
  if (length < 14 || std::memcmp(d + at + 2, "Adobe", 5) != 0) return;
  out.adobe = true;
  out.adobe_transform = d[at + 13];
}

// APP0 "JFIF\0" with its 14 bytes of data, as libjpeg's examine_app0 requires.
bool is_jfif(const std::uint8_t* d, std::size_t at, std::size_t length) {
  return length >= 16 && std::memcmp(d + at + 2, "JFIF", 5) == 0;
}

}  // namespace

const char* process_name(jpeg_process p) {
  switch (p) {
    case jpeg_process::none:
      return "none";
    case jpeg_process::baseline:
      return "baseline";
    case jpeg_process::extended:
      return "extended";
    case jpeg_process::progressive:
      return "progressive";
    case jpeg_process::lossless:
      return "lossless";
    case jpeg_process::hierarchical:
      return "hierarchical";
  }
  return "?";
}

std::string jpeg_markers::subsampling() const {
  if (components == 1) return "gray";
  if (components != 3) return "other";
  const jpeg_component& y = component[0];
  for (std::size_t k = 1; k < 3; ++k)
    if (component[k].h != 1 || component[k].v != 1) return "other";
  if (y.h == 1 && y.v == 1) return "4:4:4";
  if (y.h == 2 && y.v == 1) return "4:2:2";
  if (y.h == 2 && y.v == 2) return "4:2:0";
  if (y.h == 1 && y.v == 2) return "4:4:0";
  if (y.h == 4 && y.v == 1) return "4:1:1";
  if (y.h == 4 && y.v == 2) return "4:1:0";
  return "other";
}

bool jpeg_markers::rgb_coded() const {
  if (components != 3 || jfif) return false;
  if (adobe) return adobe_transform == 0;
  return component[0].id == 'R' && component[1].id == 'G' && component[2].id == 'B';
}

bool jpeg_markers::engine_kind() const {
  if (!ok() || arithmetic || precision != 8 || process != jpeg_process::baseline || rgb_coded()) return false;
  const std::string s = subsampling();
  return s == "4:2:0" || s == "4:4:4" || s == "4:2:2" || s == "gray";
}

// Walks the file as a decoder reads it: marker segments skipped by their length (an EXIF
// thumbnail's own FF D9 is inside one), entropy-coded data up to the next marker (there 0xFF is
// stuffed as FF 00, and FF D0..D7 are restarts). What follows the end marker (a Motion Photo's
// video) is never looked at. A single-scan file is only decoded down to its crop's last row, so
// what libjpeg would refuse after the image data (met by jpeg_finish_decompress, which reads on
// to the end marker) is found here, for every crop alike.
jpeg_markers read_jpeg_markers(const std::uint8_t* d, std::size_t size) {
  jpeg_markers out;
  if (size < 4 || d[0] != 0xFF || d[1] != 0xD8) {
    char head[80];
    std::snprintf(head, sizeof head, "not a JPEG file (starts with 0x%02x 0x%02x, expected 0xff 0xd8)",
                  size > 0 ? d[0] : 0, size > 1 ? d[1] : 0);
    out.refused = head;
    return out;
  }
  int frames = 0;
  bool single_scan = false;
  std::size_t i = 2;  // after SOI
  while (i < size) {
    const void* ff = std::memchr(d + i, 0xFF, size - i);  // libjpeg skips stray bytes between segments too
    if (!ff) return out;
    std::size_t j = static_cast<std::size_t>(static_cast<const std::uint8_t*>(ff) - d) + 1;
    while (j < size && d[j] == 0xFF) ++j;  // fill bytes
    if (j >= size) return out;
    const std::uint8_t m = d[j];
    i = j + 1;
    if (m == 0xD9) {
      out.end = i;
      return out;
    }
    if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;  // stuffing, TEM, restarts: no length
    if (m == 0xD8) {
      out.refused = "invalid JPEG structure: two SOI markers";
    } else if (is_frame(m) && ++frames > 1) {
      out.refused = "invalid JPEG structure: two SOF markers";
    } else if (m == 0xDA && ++out.scans > 1 && single_scan) {
      out.refused = "invalid JPEG structure: more than one scan in a single-scan (sequential) JPEG";
    } else if (!is_frame(m) && m != 0xDA && !is_known(m)) {
      char text[64];
      std::snprintf(text, sizeof text, "unsupported JPEG marker 0xff%02x", m);
      out.refused = text;
    }
    if (!out.refused.empty() || i + 2 > size) return out;
    const std::size_t length = static_cast<std::size_t>(d[i]) << 8 | d[i + 1];
    const bool whole = i + length <= size;  // the segment's fields lie within the file
    if (is_frame(m)) {
      if (whole) {
        read_frame(d, i, length, m, out);
      } else {
        out.frame_marker = m;
        out.process = process_of(m);
        out.arithmetic = m >= 0xC9;
      }
    }
    // libjpeg chooses the colour space from the markers before the first scan only.
    if (m == 0xEE && whole && out.scans == 0) read_adobe(d, i, length, out);
    if (m == 0xE0 && whole && out.scans == 0 && is_jfif(d, i, length)) out.jfif = true;
    if (m == 0xDA && out.scans == 1 && i + 3 <= size)
      single_scan = (out.frame_marker & 0x03) != 2 && d[i + 2] == out.components;  // SOF2, 6, 10, 14: progressive
    i += std::max<std::size_t>(length, 2);  // after SOS: its entropy-coded data, scanned as above
  }
  return out;
}

}  // namespace trainbench
