// How much of a JPEG decode any loader built on libjpeg-turbo can avoid: the thread CPU time per
// image of a whole decode, of the entropy (Huffman) decoding alone, and of partial decodes, over
// every JPEG below a folder (files read into memory first, 3 passes). scripts/bench-imagefolder.sh
// builds and runs it:
//   g++ -O2 -std=c++17 scripts/jpeg-floor.cpp -ljpeg -o build/jpeg-floor && build/jpeg-floor DIR
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

// clang-format off: jpeglib.h after the headers that declare size_t and FILE
#include <jpeglib.h>
// clang-format on

namespace {

double thread_cpu_s() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum class mode { whole, entropy_only, top_rows, columns, centre_crop };

void read_rows(jpeg_decompress_struct& c, std::vector<unsigned char>& row, unsigned stop) {
  while (c.output_scanline < stop) {
    JSAMPROW r = row.data();
    jpeg_read_scanlines(&c, &r, 1);
  }
}

// One decode as the mode says; 60% of the rows or columns where it takes a part.
void decode(jpeg_decompress_struct& c, const std::vector<unsigned char>& file, mode m,
            std::vector<unsigned char>& row) {
  jpeg_mem_src(&c, file.data(), file.size());
  jpeg_read_header(&c, TRUE);
  if (c.jpeg_color_space != JCS_GRAYSCALE) c.out_color_space = JCS_RGB;  // as trainbench decodes
  c.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&c);
  const unsigned h = c.output_height, w = c.output_width;
  if (row.size() < 4 * w) row.resize(4 * w);
  switch (m) {
    case mode::whole:
      read_rows(c, row, h);
      break;
    case mode::entropy_only:
      // Skipping to the very end decodes nothing; to the last row, every row's coefficients.
      jpeg_skip_scanlines(&c, h - 1);
      read_rows(c, row, h);
      break;
    case mode::top_rows:
      read_rows(c, row, h * 3 / 5);
      break;
    case mode::columns: {
      JDIMENSION x0 = w / 5, width = w * 3 / 5;
      jpeg_crop_scanline(&c, &x0, &width);
      read_rows(c, row, h);
      break;
    }
    case mode::centre_crop: {
      JDIMENSION x0 = w / 5, width = w * 3 / 5;
      jpeg_crop_scanline(&c, &x0, &width);
      jpeg_skip_scanlines(&c, h / 5);
      read_rows(c, row, h * 4 / 5);
      break;
    }
  }
  jpeg_abort_decompress(&c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: jpeg-floor DIR\n");
    return 2;
  }
  std::vector<std::vector<unsigned char>> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(argv[1])) {
    const auto ext = e.path().extension();
    if (ext != ".JPEG" && ext != ".jpg" && ext != ".jpeg") continue;
    std::ifstream f(e.path(), std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  if (files.empty()) {
    std::fprintf(stderr, "jpeg-floor: no JPEG below %s\n", argv[1]);
    return 2;
  }
  jpeg_decompress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_decompress(&c);
  std::vector<unsigned char> row;
  const struct {
    mode m;
    const char* name;
  } modes[] = {{mode::whole, "whole decode (RGB)"},
               {mode::entropy_only, "entropy decoding only"},
               {mode::top_rows, "top 60% of the rows"},
               {mode::columns, "middle 60% of the columns"},
               {mode::centre_crop, "centre crop, 60% x 60%"}};
  std::printf("%zu files, thread CPU ms per image (3 passes):\n", files.size());
  for (const auto& [m, name] : modes) {
    const double start = thread_cpu_s();
    for (int pass = 0; pass < 3; ++pass)
      for (const auto& f : files) decode(c, f, m, row);
    std::printf("  %-28s %.3f\n", name, (thread_cpu_s() - start) / (3.0 * files.size()) * 1000);
  }
  jpeg_destroy_decompress(&c);
  return 0;
}
