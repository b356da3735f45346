// The one JPEG marker walker (data/jpeg_markers.hpp): what it says about each kind of file, where
// the image ends (a Motion Photo's video is not part of it), and truncated files.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>

#include "helpers.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/jpeg_markers.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> fixture(const std::string& name) {
  std::ifstream in(tbtest::source_dir() / "tests/fixtures/jpeg" / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::uint8_t> gradient(int w, int h, int channels) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>((i * 7 + i / 97) % 251);
  return px;
}

jpeg_markers walk(const std::vector<std::uint8_t>& b) { return read_jpeg_markers(b.data(), b.size()); }

// The offset of the first frame marker (FF Cn after SOI, found by walking the segments).
std::size_t frame_at(const std::vector<std::uint8_t>& b) {
  std::size_t i = 2;
  while (i + 4 <= b.size()) {
    const std::uint8_t m = b[i + 1];
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return i;
    i += 2 + (static_cast<std::size_t>(b[i + 2]) << 8 | b[i + 3]);
  }
  FAIL("no frame marker");
  return 0;
}

// A Motion Photo: the JPEG, then an MP4 whose bytes hold a JPEG-like FF D8 ... FF D9 of their own.
std::vector<std::uint8_t> motion_photo(std::vector<std::uint8_t> bytes) {
  const std::uint8_t box[] = {0, 0, 0, 24, 'f', 't', 'y', 'p', 'm', 'p', '4', '2'};
  bytes.insert(bytes.end(), std::begin(box), std::end(box));
  const std::uint8_t inner[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF, 0xD9};
  for (int i = 0; i < 4096; ++i) bytes.push_back(static_cast<std::uint8_t>((i * 131 + 7) % 251));
  bytes.insert(bytes.end(), std::begin(inner), std::end(inner));
  for (int i = 0; i < 512; ++i) bytes.push_back(static_cast<std::uint8_t>(i % 200));
  return bytes;
}

}  // namespace

TEST_CASE("the marker walker tells baseline, progressive, grayscale and their subsampling", "[jpeg]") {
  struct expect {
    const char* file;
    jpeg_process process;
    int components;
    const char* subsampling;
  };
  for (const expect& e : {expect{"color420.jpg", jpeg_process::baseline, 3, "4:2:0"},
                          expect{"color444.jpg", jpeg_process::baseline, 3, "4:4:4"},
                          expect{"progressive.jpg", jpeg_process::progressive, 3, "4:2:0"},
                          expect{"gray.jpg", jpeg_process::baseline, 1, "gray"}}) {
    INFO(e.file);
    const auto bytes = fixture(e.file);
    const jpeg_markers m = walk(bytes);
    CHECK(m.ok());
    CHECK(m.refused.empty());
    CHECK(m.process == e.process);
    CHECK_FALSE(m.arithmetic);
    CHECK(m.precision == 8);
    CHECK(m.components == e.components);
    CHECK(m.subsampling() == e.subsampling);
    CHECK(m.end == bytes.size());  // the fixtures end with their EOI
    CHECK_FALSE(m.cmyk());
    // The frame's size is libjpeg's.
    jpeg_decoder d;
    const jpeg_info info = d.open(bytes.data(), bytes.size(), 1 << 30);
    CHECK(m.width == info.width);
    CHECK(m.height == info.height);
    CHECK((m.process == jpeg_process::progressive) == info.progressive);
    CHECK(m.scans >= 1);
    if (m.process == jpeg_process::progressive) CHECK(m.scans > 1);
  }
}

TEST_CASE("the marker walker finds CMYK and its Adobe marker", "[jpeg]") {
  for (const char* name : {"cmyk.jpg", "cmyk_k.jpg"}) {
    INFO(name);
    const jpeg_markers m = walk(fixture(name));
    CHECK(m.ok());
    CHECK(m.components == 4);
    CHECK(m.cmyk());
    CHECK(m.subsampling() == "other");
  }
  // Adobe's APP14 carries the transform flag (here 0: CMYK as is); files without one say -1.
  const jpeg_markers cmyk = walk(fixture("cmyk.jpg"));
  if (cmyk.adobe) CHECK(cmyk.adobe_transform >= 0);
  CHECK(walk(fixture("color420.jpg")).adobe_transform == -1);
  auto with_adobe = fixture("color420.jpg");
  const std::uint8_t app14[] = {0xFF, 0xEE, 0x00, 0x0E, 'A', 'd', 'o', 'b', 'e', 0x00, 0x64, 0x00, 0x00, 0x00, 0x00, 0x01};
  with_adobe.insert(with_adobe.begin() + 2, std::begin(app14), std::end(app14));
  const jpeg_markers a = walk(with_adobe);
  CHECK(a.ok());
  CHECK(a.adobe);
  CHECK(a.adobe_transform == 1);
}

// libjpeg decides the colour space of three components from the markers before the first scan:
// a JFIF segment means YCbCr whatever follows; else Adobe's transform; else the component ids.
TEST_CASE("the marker walker says which three-component files are coded as RGB, as libjpeg decides", "[jpeg]") {
  const jpeg_markers plain = walk(fixture("color420.jpg"));
  CHECK(plain.jfif);
  CHECK_FALSE(plain.rgb_coded());
  // The fixture's APP0 turned into an APP1: no JFIF segment left.
  auto no_jfif = fixture("color420.jpg");
  REQUIRE(no_jfif[3] == 0xE0);
  no_jfif[3] = 0xE1;
  CHECK_FALSE(walk(no_jfif).jfif);
  CHECK_FALSE(walk(no_jfif).rgb_coded());  // ids 1, 2, 3
  auto with_app14 = [](std::vector<std::uint8_t> bytes, std::uint8_t transform, std::size_t at) {
    const std::uint8_t app14[] = {0xFF, 0xEE, 0x00, 0x0E, 'A', 'd', 'o', 'b', 'e', 0x00, 0x64, 0x00, 0x00, 0x00, 0x00,
                                  transform};
    bytes.insert(bytes.begin() + static_cast<long>(at), std::begin(app14), std::end(app14));
    return bytes;
  };
  CHECK(walk(with_app14(no_jfif, 0, 2)).rgb_coded());
  CHECK_FALSE(walk(with_app14(no_jfif, 1, 2)).rgb_coded());
  CHECK_FALSE(walk(with_app14(fixture("color420.jpg"), 0, 2)).rgb_coded());  // JFIF wins
  // After the first scan (here just before EOI) libjpeg has chosen already.
  const jpeg_markers late = walk(with_app14(no_jfif, 0, no_jfif.size() - 2));
  CHECK(late.ok());
  CHECK_FALSE(late.adobe);
  CHECK_FALSE(late.rgb_coded());
}

TEST_CASE("the marker walker reads arithmetic, lossless and hierarchical frame markers", "[jpeg]") {
  const auto px = gradient(40, 24, 3);
  const auto arith = tbtest::encode_arithmetic_jpeg(px.data(), 40, 24);
  const jpeg_markers a = walk(arith);
  CHECK(a.ok());
  CHECK(a.arithmetic);
  CHECK(a.frame_marker >= 0xC9);
  CHECK(a.width == 40);
  CHECK(a.height == 24);
  // The walker reads markers, not entropy-coded data: a frame marker rewritten is read as such.
  auto base = fixture("color444.jpg");
  const std::size_t at = frame_at(base);
  for (const auto& [marker, process] : {std::pair{0xC3, jpeg_process::lossless}, std::pair{0xC1, jpeg_process::extended},
                                        std::pair{0xC5, jpeg_process::hierarchical}}) {
    auto b = base;
    b[at + 1] = static_cast<std::uint8_t>(marker);
    const jpeg_markers m = walk(b);
    INFO(std::hex << marker);
    CHECK(m.process == process);
    CHECK_FALSE(m.arithmetic);
    CHECK(m.frame_marker == marker);
  }
  auto twelve = base;
  twelve[at + 4] = 12;  // P, the sample precision
  CHECK(walk(twelve).precision == 12);
}

TEST_CASE("a Motion Photo ends at its image's end-of-image marker, not at the video's", "[jpeg]") {
  for (const char* name : {"color420.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg"}) {
    INFO(name);
    const auto plain = fixture(name);
    const auto photo = motion_photo(plain);
    REQUIRE(photo.size() > plain.size() + 4000);
    const jpeg_markers m = walk(photo);
    CHECK(m.ok());
    CHECK(m.end == plain.size());
    CHECK(photo[m.end - 2] == 0xFF);
    CHECK(photo[m.end - 1] == 0xD9);
  }
}

TEST_CASE("an EXIF thumbnail's own end marker inside its segment is not the image's end", "[jpeg]") {
  const auto plain = fixture("color420.jpg");
  const auto thumb = fixture("gray.jpg");
  std::vector<std::uint8_t> app1 = {0xFF, 0xE1, 0, 0, 'E', 'x', 'i', 'f', 0, 0};
  app1.insert(app1.end(), thumb.begin(), thumb.end());
  const std::size_t length = app1.size() - 2;
  app1[2] = static_cast<std::uint8_t>(length >> 8);
  app1[3] = static_cast<std::uint8_t>(length & 0xFF);
  auto b = plain;
  b.insert(b.begin() + 2, app1.begin(), app1.end());
  const jpeg_markers m = walk(b);
  CHECK(m.ok());
  CHECK(m.end == b.size());
  CHECK(m.components == 3);  // the image's frame, not the thumbnail's
}

TEST_CASE("truncated and foreign files: no end, or refused, and never a read past the size", "[jpeg]") {
  const auto plain = fixture("color420.jpg");
  const std::size_t at = frame_at(plain);
  // Cut anywhere before the end marker's last byte: no end is found. (Cut inside the frame
  // header: the frame is known by its marker, its fields are not read.)
  for (std::size_t cut : {std::size_t{4}, at + 1, at + 5, plain.size() / 2, plain.size() - 1}) {
    INFO("cut at " << cut << " of " << plain.size());
    const std::vector<std::uint8_t> b(plain.begin(), plain.begin() + static_cast<long>(cut));
    const jpeg_markers m = walk(b);
    CHECK(m.end == 0);
    CHECK_FALSE(m.ok());
  }
  const std::vector<std::uint8_t> header_only(plain.begin(), plain.begin() + static_cast<long>(at + 12));
  CHECK(walk(header_only).width == 0);  // the frame segment is cut: its fields are not trusted
  const std::uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  const jpeg_markers p = read_jpeg_markers(png, sizeof png);
  CHECK(p.refused.find("not a JPEG file") != std::string::npos);
  CHECK(read_jpeg_markers(png, 0).refused.find("not a JPEG file") != std::string::npos);
  // Two SOI markers, an unknown marker: refused, as libjpeg would.
  auto twice = plain;
  const std::uint8_t soi[] = {0xFF, 0xD8};
  twice.insert(twice.begin() + 2, std::begin(soi), std::end(soi));
  CHECK(walk(twice).refused.find("two SOI") != std::string::npos);
  auto odd = plain;
  const std::uint8_t jpg13[] = {0xFF, 0xFD, 0x00, 0x02};
  odd.insert(odd.begin() + 2, std::begin(jpg13), std::end(jpg13));
  CHECK(walk(odd).refused == "unsupported JPEG marker 0xfffd");
}
