// make-dataset imagefolder: JPEGs with natural-image statistics, so that decode costs what it
// costs on real photographs. A dead-leaves model (overlapping shapes whose sizes follow the
// r^-3 law that gives natural images their 1/f spectrum), with shaded and striped textures, a
// slight optical blur and sensor grain; ImageNet-like sizes, quality 90, 4:2:0 chroma.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "trainbench/data/dataset.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

struct image_spec {
  int width = 0, height = 0;
  bool grayscale = false, progressive = false;
};

// ImageNet-like: mostly 500 x 375 and 500 x 333 (either way round), the rest with a shorter side
// in 300-450; the longer side at most 500, as in ImageNet's training set.
image_spec draw_spec(std::mt19937_64& rng, std::int64_t serial) {
  std::uniform_real_distribution<double> u(0, 1);
  image_spec s;
  const double pick = u(rng);
  const int shorter = pick < 0.4 ? 333 : pick < 0.7 ? 375 : 300 + static_cast<int>(u(rng) * 150);
  const double ratios[] = {1.0, 4.0 / 3.0, 4.0 / 3.0, 3.0 / 2.0, 16.0 / 9.0};
  const double ratio = ratios[static_cast<int>(u(rng) * 5) % 5];
  const int longer = std::max(shorter, std::min(500, static_cast<int>(shorter * ratio)));
  const bool portrait = u(rng) < 0.2;
  s.width = portrait ? shorter : longer;
  s.height = portrait ? longer : shorter;
  s.grayscale = serial % 25 == 7;    // ImageNet has about 2% grayscale files
  s.progressive = serial % 10 == 3;  // and some progressive ones
  return s;
}

void render(const image_spec& spec, std::mt19937_64& rng, std::vector<float>& rgb) {
  const int w = spec.width, h = spec.height;
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> n(0, 1);
  rgb.assign(static_cast<std::size_t>(w) * h * 3, 0.f);
  const double rmin = 1.5, rmax = 0.35 * std::max(w, h);
  const std::int64_t shapes = static_cast<std::int64_t>(w) * h / 40;
  for (std::int64_t k = 0; k < shapes; ++k) {
    // Pareto radius: p(r) ~ r^-3 above rmin, scale invariance as in natural scenes.
    const double r = std::min(rmax, rmin / std::sqrt(1.0 - u(rng)));
    const double a = r, b = r * (0.3 + 0.7 * u(rng)), theta = u(rng) * M_PI;
    const double cx = u(rng) * w, cy = u(rng) * h;
    const double luma = 20 + 215 * u(rng), cb = 22 * n(rng), cr = 22 * n(rng);
    const float base[3] = {static_cast<float>(luma + 1.402 * cr), static_cast<float>(luma - 0.344 * cb - 0.714 * cr),
                           static_cast<float>(luma + 1.772 * cb)};
    const float gx = static_cast<float>(0.6 * n(rng)), gy = static_cast<float>(0.6 * n(rng));  // shading
    const bool striped = u(rng) < 0.25;
    const float freq = static_cast<float>(0.15 + 0.8 * u(rng)), phase = static_cast<float>(u(rng) * 6.28);
    const float amp = static_cast<float>(8 + 25 * u(rng));
    const float ct = static_cast<float>(std::cos(theta)), st = static_cast<float>(std::sin(theta));
    const float ia2 = static_cast<float>(1 / (a * a)), ib2 = static_cast<float>(1 / (b * b));
    const float fb = static_cast<float>(b);
    // Inside q < 1 - 0.5/b the shape covers the pixel fully; the edge band is antialiased.
    const float inner = static_cast<float>(std::pow(std::max(0.0, 1 - 0.5 / b), 2));
    const float outer = static_cast<float>(std::pow(1 + 0.5 / b, 2));
    const double ex = std::sqrt(a * a * ct * ct + b * b * st * st), ey = std::sqrt(a * a * st * st + b * b * ct * ct);
    const int x0 = std::max(0, static_cast<int>(cx - ex - 1)), x1 = std::min(w, static_cast<int>(cx + ex + 2));
    const int y0 = std::max(0, static_cast<int>(cy - ey - 1)), y1 = std::min(h, static_cast<int>(cy + ey + 2));
    for (int y = y0; y < y1; ++y) {
      const float dy = static_cast<float>(y + 0.5 - cy);
      for (int x = x0; x < x1; ++x) {
        const float dx = static_cast<float>(x + 0.5 - cx);
        const float px = dx * ct + dy * st, py = -dx * st + dy * ct;
        const float q2 = px * px * ia2 + py * py * ib2;
        if (q2 >= outer) continue;
        const float cover = q2 <= inner ? 1.f : std::clamp((1.f - std::sqrt(q2)) * fb + 0.5f, 0.f, 1.f);
        float tex = gx * px + gy * py;
        if (striped) tex += amp * std::sin(freq * px + phase);
        float* p = &rgb[(static_cast<std::size_t>(y) * w + x) * 3];
        for (int c = 0; c < 3; ++c) p[c] += (base[c] + tex - p[c]) * cover;
      }
    }
  }
  // Optics: a [1 6 1] / 8 blur each way. Then sensor grain, mostly in luminance.
  std::vector<float> tmp(rgb.size());
  for (int pass = 0; pass < 2; ++pass) {
    const int step = pass == 0 ? 3 : 3 * w, len = pass == 0 ? w : h;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const int pos = pass == 0 ? x : y;
        const std::size_t i = (static_cast<std::size_t>(y) * w + x) * 3;
        for (int c = 0; c < 3; ++c) {
          const float mid = rgb[i + c];
          const float lo = pos > 0 ? rgb[i + c - step] : mid, hi = pos + 1 < len ? rgb[i + c + step] : mid;
          tmp[i + c] = 0.125f * lo + 0.75f * mid + 0.125f * hi;
        }
      }
    rgb.swap(tmp);
  }
  for (std::size_t i = 0; i < rgb.size(); i += 3) {
    const double grain = 4.5 * n(rng);
    for (int c = 0; c < 3; ++c) rgb[i + c] += static_cast<float>(grain + 2.0 * n(rng));
  }
}

std::vector<std::uint8_t> to_pixels(const std::vector<float>& rgb, bool grayscale) {
  auto clamp8 = [](double v) { return static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L)); };
  std::vector<std::uint8_t> out(grayscale ? rgb.size() / 3 : rgb.size());
  if (!grayscale) {
    for (std::size_t i = 0; i < rgb.size(); ++i) out[i] = clamp8(rgb[i]);
  } else {
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = clamp8(0.299 * rgb[3 * i] + 0.587 * rgb[3 * i + 1] + 0.114 * rgb[3 * i + 2]);
  }
  return out;
}

struct totals {
  std::atomic<std::int64_t> files{0}, bytes{0}, width{0}, height{0}, grayscale{0}, progressive{0};
};

void write_one(const fs::path& file, std::uint64_t seed, std::int64_t serial, std::vector<float>& rgb, totals& t) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(serial));
  const image_spec spec = draw_spec(rng, serial);
  render(spec, rng, rgb);
  const auto pixels = to_pixels(rgb, spec.grayscale);
  jpeg_encode_options o;
  o.quality = 90;
  o.progressive = spec.progressive;
  const auto jpeg = encode_jpeg(pixels.data(), spec.width, spec.height, spec.grayscale ? 1 : 3, o);
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
  if (!out) throw input_error("make-dataset: cannot write " + file.string());
  t.files += 1;
  t.bytes += static_cast<std::int64_t>(jpeg.size());
  t.width += spec.width;
  t.height += spec.height;
  t.grayscale += spec.grayscale;
  t.progressive += spec.progressive;
}

}  // namespace

generated_folder write_image_folder(const fs::path& dir, int classes, int per_class, std::uint64_t seed) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
    throw input_error("make-dataset: '" + dir.string() + "' exists and is not empty; give a new folder");
  // Built beside the target and renamed into place: an interrupted run leaves no half dataset.
  const fs::path partial = dir.string() + ".partial";
  fs::remove_all(partial, ec);
  struct job {
    fs::path file;
    std::int64_t serial;
  };
  std::vector<job> jobs;
  const int val_per_class = std::max(1, per_class / 10);
  std::int64_t serial = 0;
  for (const char* split : {"train", "val"}) {
    const int count = std::string(split) == "train" ? per_class : val_per_class;
    for (int c = 0; c < classes; ++c) {
      char name[32];
      std::snprintf(name, sizeof name, "class_%04d", c);
      const fs::path folder = partial / split / name;
      fs::create_directories(folder);
      for (int i = 0; i < count; ++i) {
        char file[64];
        std::snprintf(file, sizeof file, "%s_%06d.JPEG", name, i);
        jobs.push_back({folder / file, serial++});
      }
    }
  }
  totals t;
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < threads; ++k) {
    pool.emplace_back([&] {
      std::vector<float> rgb;
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        try {
          write_one(jobs[i].file, seed, jobs[i].serial, rgb, t);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (!error) error = std::current_exception();
          next = jobs.size();
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  if (error) {
    fs::remove_all(partial, ec);
    std::rethrow_exception(error);
  }
  write_file_atomic(partial / "GENERATED", "dead-leaves JPEGs written by trainbench make-dataset imagefolder (seed " +
                                               std::to_string(seed) + ")\n");
  fs::remove(dir, ec);  // an empty folder given as the target
  fs::rename(partial, dir);
  generated_folder g;
  g.files = t.files;
  g.threads = static_cast<int>(threads);
  g.val_per_class = val_per_class;
  g.mean_bytes = static_cast<double>(t.bytes) / t.files;
  g.mean_width = static_cast<double>(t.width) / t.files;
  g.mean_height = static_cast<double>(t.height) / t.files;
  g.grayscale = t.grayscale;
  g.progressive = t.progressive;
  return g;
}

}  // namespace trainbench
