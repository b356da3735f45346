// Image folders: the index (torchvision's ImageFolder order), the loader over JPEG files, and
// every kind of bad input the issue lists.
#include <ATen/ATen.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "helpers.hpp"
#include "trainbench/data/fused_crop.hpp"
#include "trainbench/data/jpeg.hpp"
#include "trainbench/data/loader.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

// A small picture whose mean colour encodes `tag`, so a batch tells which file it came from.
std::vector<std::uint8_t> jpeg_bytes(int w, int h, int tag, int channels = 3) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        px[(static_cast<std::size_t>(y) * w + x) * channels + c] =
            static_cast<std::uint8_t>(std::min(255, tag * 20 + ((x / 4 + y / 4) % 2) * 8 + c * 3));
  return encode_jpeg(px.data(), w, h, channels, {});
}

void write_bytes(const fs::path& file, const std::vector<std::uint8_t>& bytes) {
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> listed(const dataset& ds) {
  std::vector<std::string> out;
  const file_list& f = *ds.files();
  for (std::int64_t i = 0; i < f.size(); ++i) out.push_back(std::to_string(f.labels[i]) + ":" + f.relative(i));
  return out;
}

loader_options folder_loader(int workers, int batch, int size = 16) {
  loader_options o;
  o.batch_size = batch;
  o.workers = workers;
  o.image_size = size;
  o.seed = 5;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  return o;
}

// Root reads every file whatever its mode; without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH in the
// effective set (restored on exit) this thread sees permissions as any user does.
struct without_dac_override {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved[2] = {};
  bool active = false;
  without_dac_override() {
    if (geteuid() != 0 || syscall(SYS_capget, &header, saved) != 0) return;
    __user_cap_data_struct reduced[2] = {saved[0], saved[1]};
    reduced[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    active = syscall(SYS_capset, &header, reduced) == 0;
  }
  ~without_dac_override() {
    if (active) syscall(SYS_capset, &header, saved);
  }
};

}  // namespace

TEST_CASE("imagefolder index: sorted classes, labels by position, files in os.walk order, JPEG extensions only") {
  const auto root = tbtest::scratch("if-index");
  write_bytes(root / "zebra/b.jpg", jpeg_bytes(8, 8, 1));
  write_bytes(root / "zebra/a.JPEG", jpeg_bytes(8, 8, 2));
  write_bytes(root / "apple/sub/x.jpeg", jpeg_bytes(8, 8, 3));
  write_bytes(root / "apple/sub-z/y.jpg", jpeg_bytes(8, 8, 3));
  write_bytes(root / "apple/sub/deep/w.jpg", jpeg_bytes(8, 8, 3));
  write_bytes(root / "apple/c.jpg", jpeg_bytes(8, 8, 4));
  write_bytes(root / "apple/notes.txt", {1, 2, 3});
  write_bytes(root / "apple/picture.png", {1, 2, 3});
  write_bytes(root / "stray.jpg", jpeg_bytes(8, 8, 5));  // not in a class folder: not a sample
  const auto ds = read_image_folder(root, "train");
  CHECK(ds->num_classes() == 2);
  CHECK(ds->files()->classes == std::vector<std::string>{"apple", "zebra"});
  // sorted(os.walk(...)) orders folders by path: "apple/sub" < "apple/sub-z" < "apple/sub/deep"
  // ('-' sorts before '/').
  CHECK(listed(*ds) == std::vector<std::string>{"0:apple/c.jpg", "0:apple/sub/x.jpeg", "0:apple/sub-z/y.jpg",
                                                "0:apple/sub/deep/w.jpg", "1:zebra/a.JPEG", "1:zebra/b.jpg"});
  CHECK(ds->files()->ignored_files == 2);
}

TEST_CASE("data.split picks root/train or root/val when the root is split") {
  const auto root = tbtest::scratch("if-split");
  write_bytes(root / "train/a/1.jpg", jpeg_bytes(8, 8, 1));
  write_bytes(root / "train/b/1.jpg", jpeg_bytes(8, 8, 1));
  write_bytes(root / "val/a/1.jpg", jpeg_bytes(8, 8, 1));
  CHECK(read_image_folder(root, "train")->num_classes() == 2);
  CHECK(read_image_folder(root, "val")->num_classes() == 1);
  const auto only_train = tbtest::scratch("if-split-train");
  write_bytes(only_train / "train/a/1.jpg", jpeg_bytes(8, 8, 1));
  CHECK_THROWS_WITH(read_image_folder(only_train, "val"), Catch::Contains("no val/ folder"));
}

TEST_CASE("imagefolder: missing root and no images are errors, an empty class folder keeps its label") {
  const auto root = tbtest::scratch("if-empty");
  CHECK_THROWS_AS(read_image_folder(root / "nope", "train"), input_error);
  CHECK_THROWS_WITH(read_image_folder(root / "nope", "train"), Catch::Contains("does not exist"));
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  CHECK_THROWS_WITH(read_image_folder(root, "train"), Catch::Contains("no .jpg or .jpeg files"));
  write_bytes(root / "b/1.jpg", jpeg_bytes(8, 8, 1));
  const auto ds = read_image_folder(root, "train");
  CHECK(ds->num_classes() == 2);
  CHECK(ds->files()->empty_classes == std::vector<std::string>{"a"});
  CHECK(ds->files()->labels == std::vector<int>{1});
}

TEST_CASE("model.num_classes must match the number of class folders") {
  const auto root = tbtest::scratch("if-classes");
  write_bytes(root / "a/1.jpg", jpeg_bytes(8, 8, 1));
  write_bytes(root / "b/1.jpg", jpeg_bytes(8, 8, 1));
  data_config cfg;
  cfg.source = data_source::imagefolder;
  cfg.path = root.string();
  CHECK_NOTHROW(open_dataset(cfg, 2, 0));
  CHECK_THROWS_WITH(open_dataset(cfg, 3, 0), Catch::Contains("2 class folders but model.num_classes is 3"));
}

TEST_CASE("image-folder batches: normalised floats, labels, the same crops whatever the worker count") {
  const auto root = tbtest::scratch("if-loader");
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 6; ++i)
      write_bytes(root / ("c" + std::to_string(c)) / (std::to_string(i) + ".jpg"),
                  jpeg_bytes(40 + 7 * i, 30 + 5 * c, c * 3 + i % 3, i == 4 ? 1 : 3));
  const auto ds = read_image_folder(root, "train");
  std::vector<at::Tensor> reference;
  for (int workers : {0, 1, 3}) {
    INFO(workers << " workers");
    batch_loader loader(ds, folder_loader(workers, 4));
    REQUIRE(loader.batches_per_epoch() == 4);
    for (int b = 0; b < 8; ++b) {
      const host_batch& batch = loader.next();
      CHECK(batch.images.sizes() == at::IntArrayRef{4, 3, 16, 16});
      const auto idx = loader.batch_indices(b);
      for (std::size_t i = 0; i < idx.size(); ++i)
        CHECK(batch.labels[static_cast<std::int64_t>(i)].item<std::int64_t>() ==
              ds->files()->labels[static_cast<std::size_t>(idx[i])]);
      if (workers == 0)
        reference.push_back(batch.images.clone());
      else
        CHECK(at::equal(batch.images, reference[static_cast<std::size_t>(b)]));
      loader.release(batch);
    }
    const load_totals t = loader.load_counts();
    CHECK(t.images >= 32);
    CHECK(t.phase_s[static_cast<int>(load_phase::decode)] > 0);
    CHECK(t.phase_s[static_cast<int>(load_phase::resize)] > 0);
  }
  // Epochs differ (new crops and order), and values are normalised (ImageNet mean/std).
  CHECK_FALSE(at::equal(reference[0], reference[4]));
  CHECK(reference[0].abs().max().item<float>() < 3.0f);
}

TEST_CASE("eval batches: one fixed centre crop per file, no flip, channels_last too") {
  const auto root = tbtest::scratch("if-eval");
  for (int i = 0; i < 4; ++i) write_bytes(root / "a" / (std::to_string(i) + ".jpg"), jpeg_bytes(50, 40, i));
  const auto ds = read_image_folder(root, "val");
  auto o = folder_loader(0, 4);
  o.folder.transform = data_transform::eval;
  o.shuffle = false;
  batch_loader first(ds, o);
  const host_batch& b0 = first.next();
  const at::Tensor e0 = b0.images.clone();
  first.release(b0);
  const host_batch& b1 = first.next();  // the next epoch: the same centre crops
  CHECK(at::equal(b1.images, e0));
  first.release(b1);
  o.channels_last = true;
  batch_loader last(ds, o);
  const host_batch& b = last.next();
  CHECK(b.images.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(at::allclose(b.images, e0));
}

namespace {

struct bad_case {
  const char* name;
  std::vector<std::uint8_t> bytes;
  const char* reason;
};

std::vector<std::uint8_t> huge_header() {
  auto bytes = jpeg_bytes(16, 16, 1);
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i) {
    if (bytes[i] == 0xFF && bytes[i + 1] == 0xC0) {  // SOF0: length(2) precision(1) height(2) width(2)
      bytes[i + 5] = bytes[i + 7] = 30000 >> 8;
      bytes[i + 6] = bytes[i + 8] = 30000 & 0xFF;
      return bytes;
    }
  }
  FAIL("no SOF0 marker");
  return bytes;
}

std::vector<bad_case> bad_cases() {
  const auto good = jpeg_bytes(24, 24, 1);
  return {
      {"not-a-jpeg.jpg", {0x89, 'P', 'N', 'G', 13, 10, 26, 10, 0, 0, 0, 13}, "not a JPEG file"},
      {"truncated.jpg", {good.begin(), good.begin() + static_cast<long>(good.size() / 2)}, "truncated"},
      {"empty.jpg", {}, "empty file"},
      {"huge.jpg", huge_header(), "30000 x 30000 = 900000000 pixels, more than data.max_image_pixels"},
  };
}

// One good file and one bad one in class "a".
std::shared_ptr<const dataset> folder_with(const fs::path& root, const bad_case& c) {
  write_bytes(root / "a/good.jpg", jpeg_bytes(24, 24, 2));
  write_bytes(root / "a" / c.name, c.bytes);
  return read_image_folder(root, "train");
}

void drain(batch_loader& loader, int batches) {
  for (int b = 0; b < batches; ++b) loader.release(loader.next());
}

}  // namespace

TEST_CASE("bad files: on_bad_file error names the file and the reason") {
  for (const auto& c : bad_cases()) {
    INFO(c.name);
    const auto root = tbtest::scratch(std::string("if-bad-") + c.name);
    const auto ds = folder_with(root, c);
    batch_loader loader(ds, folder_loader(1, 2));
    try {
      drain(loader, 1);
      FAIL("no error");
    } catch (const input_error& e) {
      CHECK_THAT(e.what(), Catch::Contains((root / "a" / c.name).string()));
      CHECK_THAT(e.what(), Catch::Contains(c.reason));
    }
  }
}

TEST_CASE("bad files: on_bad_file skip replaces the sample with the next good file and counts it") {
  for (const auto& c : bad_cases()) {
    INFO(c.name);
    const auto root = tbtest::scratch(std::string("if-skip-") + c.name);
    const auto ds = folder_with(root, c);
    auto o = folder_loader(0, 2);  // filled on demand: the count is exact when read
    o.folder.skip_bad_files = true;
    batch_loader loader(ds, o);
    drain(loader, 3);  // three epochs: the bad file is found once and skipped every time
    const auto skipped = loader.skipped_files();
    REQUIRE(skipped.size() == 1);
    CHECK(skipped[0].path == (root / "a" / c.name).string());
    CHECK_THAT(skipped[0].reason, Catch::Contains(c.reason));
    CHECK(loader.replaced_samples() == 3);
  }
}

TEST_CASE("bad files: a replacement sample is cropped and flipped by its own draw, not its file's") {
  const auto root = tbtest::scratch("if-skip-draw");
  write_bytes(root / "a/0.jpg", {0x89, 'P', 'N', 'G', 13, 10, 26, 10});
  write_bytes(root / "a/1.jpg", jpeg_bytes(96, 80, 2));
  const auto ds = read_image_folder(root, "train");
  folder_options fo;
  fo.image_size = 16;
  fo.seed = 5;
  fo.skip_bad_files = true;
  bad_files bad(ds->files()->size());
  folder_reader reader(*ds->files(), fo, bad);
  std::vector<float> out(3 * 16 * 16);
  load_counters counters(1);
  std::vector<load_sink*> sinks{&counters};
  phase_marker marks(sinks, 0, 0);
  int repeated = 0;
  for (std::int64_t epoch = 0; epoch < 4; ++epoch) {
    INFO("epoch " << epoch);
    reader.read(1, epoch, out.data(), marks);
    const decode_facts own = reader.last();
    reader.read(0, epoch, out.data(), marks);  // 0.jpg is bad: 1.jpg stands in for sample 0
    const decode_facts stand_in = reader.last();
    sample_rng rng(5, epoch, 0);  // sample 0's draw
    const crop_box want = random_resized_crop(80, 96, rng);
    CHECK(stand_in.box.top == want.top);
    CHECK(stand_in.box.left == want.left);
    CHECK(stand_in.box.height == want.height);
    CHECK(stand_in.box.width == want.width);
    CHECK(stand_in.flip == (rng.uniform(0.0, 1.0) < 0.5));
    repeated += own.box.top == stand_in.box.top && own.box.left == stand_in.box.left &&
                own.box.height == stand_in.box.height && own.box.width == stand_in.box.width &&
                own.flip == stand_in.flip;
  }
  CHECK(repeated == 0);
  CHECK(bad.replacements() == 4);
}

namespace {

// `bytes` with `extra` inserted just before its end-of-image marker (the file's last two bytes).
std::vector<std::uint8_t> before_end(std::vector<std::uint8_t> bytes, const std::vector<std::uint8_t>& extra) {
  bytes.insert(bytes.end() - 2, extra.begin(), extra.end());
  return bytes;
}

// What the loader makes of a folder of 64 x 48 JPEGs, one of them `odd`, in each transform and
// decode mode, over four epochs of 16-pixel crops: "ok" or the error.
std::vector<std::string> verdicts(const fs::path& root, const std::vector<std::uint8_t>& odd) {
  for (int i = 0; i < 3; ++i) write_bytes(root / "a" / (std::to_string(i) + ".jpg"), jpeg_bytes(64, 48, i));
  write_bytes(root / "a/odd.jpg", odd);
  const auto ds = read_image_folder(root, "train");
  std::vector<std::string> out;
  for (data_transform t : {data_transform::train, data_transform::eval})
    for (bool partial : {true, false}) {
      auto o = folder_loader(0, 4);
      o.folder.transform = t;
      o.folder.partial_decode = partial;
      batch_loader loader(ds, o);
      try {
        drain(loader, 4);
        out.push_back("ok");
      } catch (const input_error& e) {
        out.push_back(e.what());
      }
    }
  return out;
}

}  // namespace

TEST_CASE("bad files: the verdict on a file is the same whatever the crop, transform and partial_decode") {
  const auto good = jpeg_bytes(64, 48, 5);
  // libjpeg's commonest warning, at the very end of the file: decoded, as torchvision and PIL do.
  const auto harmless = verdicts(tbtest::scratch("if-verdict-extraneous"), before_end(good, {0x00, 0x00}));
  CHECK(harmless == std::vector<std::string>(4, "ok"));
  // A second frame header after the image data: refused by libjpeg (and so torchvision and PIL)
  // when it reads to the end, and here in every mode, not only when a crop reaches the last row.
  std::vector<std::uint8_t> frame;
  for (std::size_t i = 2; i + 4 < good.size() && frame.empty(); ++i)
    if (good[i] == 0xFF && good[i + 1] == 0xC0)
      frame.assign(good.begin() + static_cast<long>(i),
                   good.begin() + static_cast<long>(i + 2 + (good[i + 2] << 8 | good[i + 3])));
  REQUIRE_FALSE(frame.empty());
  const fs::path root = tbtest::scratch("if-verdict-frame");
  const auto refused = verdicts(root, before_end(good, frame));
  for (const auto& v : refused) CHECK_THAT(v, Catch::Contains((root / "a/odd.jpg").string()));
  CHECK(refused == std::vector<std::string>(4, refused[0]));
}

TEST_CASE("bad files: a file without read permission names the file (also when run as root)") {
  const auto root = tbtest::scratch("if-unreadable");
  write_bytes(root / "a/good.jpg", jpeg_bytes(24, 24, 2));
  write_bytes(root / "a/locked.jpg", jpeg_bytes(24, 24, 3));
  fs::permissions(root / "a/locked.jpg", fs::perms::none);
  const auto ds = read_image_folder(root, "train");
  without_dac_override as_user;
  batch_loader loader(ds, folder_loader(0, 2));
  CHECK_THROWS_WITH(drain(loader, 1), Catch::Contains("locked.jpg: cannot open: Permission denied"));
  fs::permissions(root / "a/locked.jpg", fs::perms::owner_read | fs::perms::owner_write);
}

TEST_CASE("max_image_pixels refuses a header before decoding, and can be raised") {
  const auto root = tbtest::scratch("if-limit");
  write_bytes(root / "a/1.jpg", jpeg_bytes(40, 30, 1));
  const auto ds = read_image_folder(root, "train");
  auto o = folder_loader(0, 1);
  o.folder.max_image_pixels = 40 * 30 - 1;
  batch_loader small(ds, o);
  CHECK_THROWS_WITH(drain(small, 1), Catch::Contains("40 x 30 = 1200 pixels, more than data.max_image_pixels (1199)"));
  o.folder.max_image_pixels = 40 * 30;
  batch_loader enough(ds, o);
  CHECK_NOTHROW(drain(enough, 1));
}

TEST_CASE("max_image_bytes: a larger file is a bad file, refused by its size before it is read") {
  const auto root = tbtest::scratch("if-bytes");
  write_bytes(root / "a/good.jpg", jpeg_bytes(24, 24, 2));
  // A JPEG head on a 3 GiB sparse file: reading it whole would need 3 GiB of memory.
  const fs::path huge = root / "a/huge.jpg";
  write_bytes(huge, jpeg_bytes(24, 24, 3));
  fs::resize_file(huge, std::uintmax_t{3} << 30);
  const auto ds = read_image_folder(root, "train");
  batch_loader strict(ds, folder_loader(0, 2));
  CHECK_THROWS_WITH(drain(strict, 1), Catch::Contains(huge.string() + ": file is 3221225472 bytes, more than "
                                                                      "data.max_image_bytes (268435456)"));
  auto o = folder_loader(0, 2);
  o.folder.skip_bad_files = true;
  batch_loader skipping(ds, o);
  drain(skipping, 2);
  REQUIRE(skipping.skipped_files().size() == 1);
  CHECK(skipping.skipped_files()[0].path == huge.string());
  CHECK(skipping.replaced_samples() == 2);
}

TEST_CASE("max_image_bytes: the limit is the file's size in bytes, and can be raised") {
  const auto root = tbtest::scratch("if-bytes-limit");
  const auto bytes = jpeg_bytes(40, 30, 1);
  write_bytes(root / "a/1.jpg", bytes);
  const auto ds = read_image_folder(root, "train");
  auto o = folder_loader(0, 1);
  o.folder.max_image_bytes = static_cast<std::int64_t>(bytes.size()) - 1;
  batch_loader small(ds, o);
  CHECK_THROWS_WITH(drain(small, 1), Catch::Contains("file is " + std::to_string(bytes.size()) + " bytes"));
  o.folder.max_image_bytes = static_cast<std::int64_t>(bytes.size());
  batch_loader enough(ds, o);
  CHECK_NOTHROW(drain(enough, 1));
}

TEST_CASE("image-folder loader: slots are reused, nothing grows per batch after warm-up") {
  const auto root = tbtest::scratch("if-reuse");
  for (int i = 0; i < 8; ++i) write_bytes(root / "a" / (std::to_string(i) + ".jpg"), jpeg_bytes(30 + i, 30, i));
  const auto ds = read_image_folder(root, "train");
  batch_loader loader(ds, folder_loader(2, 2));
  std::set<const void*> buffers;
  for (int b = 0; b < 20; ++b) {
    const host_batch& batch = loader.next();
    buffers.insert(batch.images.data_ptr());
    loader.release(batch);
  }
  CHECK(static_cast<int>(buffers.size()) == loader.slots());
}

TEST_CASE("data.decode: device batches carry each file's bytes and the host sampler's crop") {
  const auto root = tbtest::scratch("if-encoded");
  for (int i = 0; i < 6; ++i) write_bytes(root / "a" / (std::to_string(i) + ".jpg"), jpeg_bytes(60 + i, 44, i));
  const auto ds = read_image_folder(root, "train");
  const file_list& files = *ds->files();
  auto o = folder_loader(1, 3);
  o.encoded = true;
  batch_loader loader(ds, o);
  folder_options fo;
  fo.image_size = 16;
  fo.seed = 5;
  bad_files bad(files.size());
  folder_reader host(files, fo, bad);
  std::vector<float> out(3 * 16 * 16);
  load_counters counters(1);
  std::vector<load_sink*> sinks{&counters};
  for (int b = 0; b < 4; ++b) {
    const host_batch& batch = loader.next();
    REQUIRE(batch.encoded);
    CHECK_FALSE(batch.images.defined());
    const encoded_batch& e = *batch.encoded;
    REQUIRE(e.plans.size() == 3);
    const auto idx = loader.batch_indices(b);
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(e.indices[i] == idx[i]);
      std::ifstream in(files.path(idx[i]), std::ios::binary);
      const std::vector<std::uint8_t> want{std::istreambuf_iterator<char>(in), {}};
      CHECK(std::equal(want.begin(), want.end(), e.bytes.begin() + static_cast<long>(e.offsets[i])));
      CHECK(e.sizes[i] == want.size());
      phase_marker marks(sinks, 0, b);
      host.read(idx[i], b / loader.batches_per_epoch(), out.data(), marks);
      const crop_box& box = host.last().box;
      CHECK(e.plans[i].x.lo == box.left);
      CHECK(e.plans[i].y.lo == box.top);
      CHECK(e.plans[i].x.hi - e.plans[i].x.lo == box.width);
      CHECK(e.plans[i].flip == host.last().flip);
    }
    loader.release(batch);
  }
}

// data.decode: device with data.pin_memory: the workers copy each batch's files into the file
// ring (pinned on a GPU host; pageable here, the same ring), in batch order, and the ring takes a
// batch's block back only through the consumer's fence once it needs the room.
TEST_CASE("data.decode: device batches come through the bounded file ring, and a batch too large for it stays pageable") {
  const auto root = tbtest::scratch("if-file-ring");
  for (int i = 0; i < 12; ++i)
    write_bytes(root / "a" / (std::to_string(i) + ".jpg"), jpeg_bytes(40 + i, 36, i));
  const auto ds = read_image_folder(root, "train");
  const file_list& files = *ds->files();
  std::size_t largest = 0;
  for (std::int64_t i = 0; i < files.size(); ++i) largest = std::max<std::size_t>(largest, fs::file_size(files.path(i)));
  for (int workers : {0, 2}) {
    INFO(workers << " workers");
    auto o = folder_loader(workers, 3);
    o.encoded = true;
    o.file_ring_bytes = 5 * largest;  // room for one batch of 3, not for two
    std::atomic<int> fences{0};  // before the loader: its destructor runs the last fences
    batch_loader loader(ds, o);
    CHECK(loader.file_ring_capacity() == 5 * largest);
    CHECK_FALSE(loader.file_ring_pinned());
    const std::uint8_t *lowest = nullptr, *highest = nullptr;
    for (int b = 0; b < 12; ++b) {
      const host_batch& batch = loader.next();
      const encoded_batch& e = *batch.encoded;
      REQUIRE(e.ring);
      CHECK(e.data() == e.ring);
      if (!lowest || e.ring < lowest) lowest = e.ring;
      if (!highest || e.ring + e.bytes.size() > highest) highest = e.ring + e.bytes.size();
      const auto idx = loader.batch_indices(b);
      for (std::size_t i = 0; i < idx.size(); ++i) {
        std::ifstream in(files.path(idx[i]), std::ios::binary);
        const std::vector<std::uint8_t> want{std::istreambuf_iterator<char>(in), {}};
        REQUIRE(e.sizes[i] == want.size());
        CHECK(std::equal(want.begin(), want.end(), e.data() + e.offsets[i]));
      }
      loader.release(batch, [&fences] { fences.fetch_add(1); });
    }
    // Twelve batches, far more than the ring holds, all within its one region: reused,
    // taken back through the consumer's fences when a batch needed the room.
    CHECK(static_cast<std::size_t>(highest - lowest) <= loader.file_ring_capacity());
    CHECK(fences.load() > 0);
  }
  // The ring smaller than any batch: every batch stays in its slot's own buffer, and arrives whole.
  auto o = folder_loader(1, 3);
  o.encoded = true;
  o.file_ring_bytes = largest;
  batch_loader loader(ds, o);
  for (int b = 0; b < 3; ++b) {
    const host_batch& batch = loader.next();
    CHECK_FALSE(batch.encoded->ring);
    CHECK(batch.encoded->data() == batch.encoded->bytes.data());
    loader.release(batch);
  }
}

namespace {

std::vector<std::uint8_t> fixture(const std::string& name) {
  std::ifstream in(tbtest::source_dir() / "tests/fixtures/jpeg" / name, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Files of every kind, larger than a crop's region: baseline 4:2:0, 4:4:4 and grayscale (what the
// JPEG engines take), progressive and CMYK (what they cannot).
fs::path engine_mix_folder() {
  static const fs::path root = [] {
    const auto dir = tbtest::scratch("if-off-engines");
    for (int i = 0; i < 4; ++i) {
      const int w = 150 + 13 * i, h = 110 + 7 * i;
      std::vector<std::uint8_t> px(static_cast<std::size_t>(w) * h * 3);
      for (std::size_t k = 0; k < px.size(); ++k) px[k] = static_cast<std::uint8_t>((k * 7 + k / 97 * 13 + i * 31) % 251);
      jpeg_encode_options progressive;
      progressive.progressive = true;
      jpeg_encode_options full_chroma;
      full_chroma.subsample_420 = false;
      write_bytes(dir / "a" / ("base" + std::to_string(i) + ".jpg"), encode_jpeg(px.data(), w, h, 3, {}));
      write_bytes(dir / "a" / ("prog" + std::to_string(i) + ".jpg"), encode_jpeg(px.data(), w, h, 3, progressive));
      write_bytes(dir / "b" / ("full" + std::to_string(i) + ".jpg"), encode_jpeg(px.data(), w, h, 3, full_chroma));
    }
    write_bytes(dir / "b" / "gray.jpg", fixture("gray.jpg"));
    write_bytes(dir / "b" / "progressive.jpg", fixture("progressive.jpg"));
    write_bytes(dir / "b" / "cmyk.jpg", fixture("cmyk.jpg"));
    write_bytes(dir / "b" / "cmyk_k.jpg", fixture("cmyk_k.jpg"));
    return dir;
  }();
  return root;
}

}  // namespace

// data.decode_off_engines: host. The workers decode what the GPU's JPEG engines cannot take, the
// crop's region at the host path's DCT scale; cropping those pixels as the device does (the fused
// crop's reference, by the shipped plan, shifted by the region) must give the host path's batch,
// with the same partial_decode, exactly. The engines' files still travel as their bytes.
TEST_CASE("data.decode: device with decode_off_engines: the workers decode what the engines cannot take, and its crop "
          "is the host path's") {
  const auto ds = read_image_folder(engine_mix_folder(), "train");
  const file_list& files = *ds->files();
  const int size = 32, batch = 4;
  // data.device_decode_share 0.5: the workers decode the files the engines could take at the
  // positions beyond the share too, and crop them as the host path does.
  for (const auto& [partial, share] : {std::pair{true, 1.0}, std::pair{false, 1.0}, std::pair{true, 0.5}}) {
    INFO((partial ? "regions" : "whole images") << ", share " << share);
    auto ho = folder_loader(1, batch, size);
    ho.folder.partial_decode = partial;
    auto eo = folder_loader(1, batch, size);
    eo.encoded = true;
    eo.folder.partial_decode = partial;
    eo.folder.decode_off_engines = true;
    eo.folder.device_share = share;
    batch_loader host(ds, ho), enc(ds, eo);
    const fused_crop_normalizer norm = fused_normalizer(normalizer(eo.mean, eo.std));
    int decoded = 0, sent = 0, smaller = 0, shared = 0;
    for (std::int64_t b = 0; b < enc.batches_per_epoch(); ++b) {
      const host_batch& h = host.next();
      const host_batch& batch_e = enc.next();
      const encoded_batch& e = *batch_e.encoded;
      REQUIRE(e.decoded.size() == static_cast<std::size_t>(batch));
      for (std::size_t i = 0; i < static_cast<std::size_t>(batch); ++i) {
        const std::string name = files.path(e.indices[i]);
        INFO(name);
        const jpeg_info& info = e.infos[i];
        const plan_region& r = e.decoded[i];
        const bool engines = e.markers[i].engine_kind();
        CHECK(engines == (name.find("prog") == std::string::npos && name.find("progressive") == std::string::npos &&
                          name.find("cmyk") == std::string::npos));
        if (engines && offered_to_device(static_cast<std::int64_t>(i), share)) {
          CHECK(r.width == 0);
          CHECK(e.sizes[i] == e.markers[i].end);
          ++sent;
          continue;
        }
        ++decoded;
        shared += engines;
        REQUIRE(r.width > 0);
        REQUIRE(e.sizes[i] == static_cast<std::size_t>(r.width) * r.height * 3);
        REQUIRE(r.x0 >= 0);
        REQUIRE(r.x0 + r.width <= info.width);
        REQUIRE(r.y0 + r.height <= info.height);
        if (!partial) CHECK((r.x0 == 0 && r.y0 == 0 && r.width == info.width && r.height == info.height));
        smaller += static_cast<std::int64_t>(r.width) * r.height < static_cast<std::int64_t>(info.width) * info.height;
        std::vector<float> got(3 * static_cast<std::size_t>(size) * size, -9.f);
        const fused_crop_output out{got.data(), 3LL * size * size, size, crop_layout::nchw, crop_dtype::float32};
        const fused_crop_job job{e.data() + e.offsets[i], 3LL * r.width, r.width, r.height, 3,
                                 fused_plan(e.plans[i], r.x0, r.y0, r.width, r.height)};
        REQUIRE(fused_crop_problem(job, size).empty());
        fused_crop_reference(job, 0, out, norm);
        const at::Tensor expected = h.images[static_cast<std::int64_t>(i)].contiguous();
        const at::Tensor mine = at::from_blob(got.data(), {3, size, size}, at::kFloat);
        CHECK(at::equal(mine, expected));
      }
      enc.release(batch_e);
      host.release(h);
    }
    CHECK(decoded >= 6);  // five progressive files, two CMYK: some may fall outside the epoch's whole batches
    CHECK(sent >= (share < 1 ? 4 : 8));
    if (partial) CHECK(smaller > 0);
    if (share < 1) CHECK(shared >= 4);  // files the engines could take, decoded by the share
    if (share == 1) CHECK(shared == 0);
  }
  // Without the switch every file travels as its bytes.
  auto o = folder_loader(1, batch, size);
  o.encoded = true;
  batch_loader plain(ds, o);
  const host_batch& b = plain.next();
  for (const plan_region& r : b.encoded->decoded) CHECK(r.width == 0);
  plain.release(b);
}

// A file the device found its JPEG engines refuse at run time (its markers allowed it) goes to the
// workers from its next read on, with decode_off_engines; without it the device keeps it.
TEST_CASE("data.decode: device: a file the JPEG engines refused at run time is decoded by the workers from its next "
          "read on") {
  const auto ds = read_image_folder(engine_mix_folder(), "train");
  const int batch = 4;
  auto o = folder_loader(0, batch, 32);  // no workers: each batch is made in next(), after the call below
  o.encoded = true;
  o.folder.decode_off_engines = true;
  batch_loader loader(ds, o);
  // The first batch's first file the engines would take.
  std::int64_t file = -1;
  {
    const host_batch& b = loader.next();
    const encoded_batch& e = *b.encoded;
    for (std::size_t i = 0; i < e.indices.size() && file < 0; ++i)
      if (e.markers[i].engine_kind()) {
        CHECK(e.decoded[i].width == 0);
        file = e.indices[i];
      }
    loader.release(b);
  }
  REQUIRE(file >= 0);
  CHECK(loader.decode_on_workers(file));
  CHECK(loader.decode_on_workers(file));  // again: still one file
  CHECK(loader.files_moved_to_workers() == 1);
  // Within the next two epochs it is read again: now as the workers' pixels, its crop's region.
  int seen = 0;
  for (std::int64_t k = 1; k < 3 * loader.batches_per_epoch(); ++k) {
    const host_batch& b = loader.next();
    const encoded_batch& e = *b.encoded;
    for (std::size_t i = 0; i < e.indices.size(); ++i) {
      if (e.indices[i] != file) continue;
      ++seen;
      CHECK(e.decoded[i].width > 0);
      CHECK(e.sizes[i] == static_cast<std::size_t>(e.decoded[i].width) * e.decoded[i].height * 3);
    }
    loader.release(b);
  }
  CHECK(seen >= 1);
  // Without decode_off_engines the workers decode nothing for the device.
  o.folder.decode_off_engines = false;
  batch_loader plain(ds, o);
  CHECK_FALSE(plain.decode_on_workers(file));
  CHECK(plain.files_moved_to_workers() == 0);
}

// A file the workers decode for the device is decoded at the host path's DCT scale: its region in
// the scaled image's pixels, and its plan scaled as they are, so the device crops it as the host
// path resamples it.
TEST_CASE("data.decode: device: the workers decode for the device at the host path's DCT scale, plan and region "
          "scaled alike") {
  const auto root = tbtest::scratch("if-worker-scale");
  write_bytes(root / "a/0.jpg", jpeg_bytes(300, 220, 3));
  const auto ds = read_image_folder(root, "train");
  for (bool partial : {true, false}) {
    INFO((partial ? "regions" : "whole images"));
    folder_options fo;
    fo.image_size = 32;
    fo.transform = data_transform::eval;  // Resize(37) + CenterCrop(32): a 220-row image shrinks 6x
    fo.decode_off_engines = true;
    fo.partial_decode = partial;
    bad_files bad(ds->files()->size());
    folder_reader reader(*ds->files(), fo, bad);
    load_counters counters(1);
    std::vector<load_sink*> sinks{&counters};
    phase_marker marks(sinks, 0, 0);
    encoded_batch e;
    reader.read_encoded(0, 0, e, marks, false);  // a baseline file at a position left to the workers
    REQUIRE(e.decoded.size() == 1);
    const resize_plan full = eval_plan(220, 300, 32);
    const int scale = partial ? dct_scale(full) : 1;
    CHECK(reader.last().scale == scale);
    if (partial) CHECK(scale == 4);
    const resize_plan want = scaled_plan(full, scale, 220, 300);
    const plan_region& r = e.decoded[0];
    CHECK(e.plans[0].x.start == want.x.start);
    CHECK(e.plans[0].x.length == want.x.length);
    CHECK(e.plans[0].y.lo == want.y.lo);
    CHECK(e.plans[0].y.hi == want.y.hi);
    CHECK(r.x0 + r.width <= jpeg_decoder::scaled(300, scale));
    CHECK(r.y0 + r.height <= jpeg_decoder::scaled(220, scale));
    CHECK(r.x0 <= want.x.lo);
    CHECK(r.x0 + r.width >= want.x.hi);
    CHECK(e.sizes[0] == static_cast<std::size_t>(r.width) * r.height * 3);
  }
}

// data.device_decode_share: exactly floor(n * share) of a batch's first n positions are offered to
// the device, spread evenly, the same in every worker and run.
TEST_CASE("data.device_decode_share: floor(n x share) of every batch's first n positions are offered, spread evenly") {
  for (std::int64_t percent : {0, 1, 10, 25, 50, 65, 70, 90, 99, 100}) {
    const double share = static_cast<double>(percent) / 100;
    INFO("share " << share);
    std::int64_t offered = 0, run = 0, longest_run = 0;
    for (std::int64_t n = 1; n <= 1024; ++n) {
      const bool o = offered_to_device(n - 1, share);
      offered += o;
      run = o ? 0 : run + 1;
      longest_run = std::max(longest_run, run);
      REQUIRE(offered == n * percent / 100);  // floor(n x share), exactly
    }
    // Spread: never more positions in a row to the workers than 1 / share rounds up to.
    if (share > 0) CHECK(longest_run <= static_cast<std::int64_t>(std::ceil(1 / share)));
  }
  CHECK(offered_to_device(0, 1.0));
  CHECK_FALSE(offered_to_device(1000, 0.0));
}

// The split is by position in the batch: the same files decoded by the workers whatever their number.
TEST_CASE("data.device_decode_share: the same positions decoded by the workers whatever the worker count") {
  const auto ds = read_image_folder(engine_mix_folder(), "train");
  const int batch = 4;
  auto run = [&](int workers) {
    auto o = folder_loader(workers, batch, 32);
    o.encoded = true;
    o.folder.decode_off_engines = true;
    o.folder.device_share = 0.5;
    batch_loader loader(ds, o);
    std::vector<std::pair<std::int64_t, bool>> seen;  // file, decoded by the workers
    for (std::int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      const host_batch& h = loader.next();
      const encoded_batch& e = *h.encoded;
      for (std::size_t i = 0; i < e.indices.size(); ++i) {
        seen.emplace_back(e.indices[i], e.decoded[i].width > 0);
        if (!offered_to_device(static_cast<std::int64_t>(i), 0.5)) CHECK(e.decoded[i].width > 0);
      }
      loader.release(h);
    }
    return seen;
  };
  const auto one = run(1);
  CHECK(one.size() >= 8);
  CHECK(run(2) == one);
  CHECK(run(0) == one);
}

TEST_CASE("data.decode: device batches leave a Motion Photo's trailing video out of the bytes sent") {
  const auto root = tbtest::scratch("if-motion-photo");
  const auto image = jpeg_bytes(48, 40, 3);
  auto photo = image;
  const std::uint8_t video[] = {0, 0, 0, 24, 'f', 't', 'y', 'p', 'm', 'p', '4', '2', 0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xD9};
  for (int k = 0; k < 300; ++k) photo.insert(photo.end(), std::begin(video), std::end(video));
  write_bytes(root / "a/photo.jpg", photo);
  write_bytes(root / "a/plain.jpg", image);
  const auto ds = read_image_folder(root, "train");
  auto o = folder_loader(0, 2);
  o.encoded = true;
  batch_loader loader(ds, o);
  const host_batch& batch = loader.next();
  const encoded_batch& e = *batch.encoded;
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(e.sizes[i] == image.size());
    CHECK(std::equal(image.begin(), image.end(), e.data() + e.offsets[i]));
    CHECK(e.markers[i].end == image.size());
  }
  CHECK(e.bytes.size() == 2 * image.size());
  loader.release(batch);
}
