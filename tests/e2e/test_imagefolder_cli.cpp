// Image folders end to end: make-dataset, bench-data's breakdown, bad input through the CLI.
#include <catch2/catch.hpp>
#include <fstream>

#include "helpers.hpp"

namespace fs = std::filesystem;

namespace {

// A tiny CPU profile on an image folder (small crops keep it quick).
std::string folder_profile(const fs::path& dir, const fs::path& data, int classes, const std::string& extra = "") {
  const fs::path file = dir / "folder.yaml";
  tbtest::write_text(file, "name: folder\ndevice: cpu\nseed: 1\nthreads: 1\nmodel: {num_classes: " +
                               std::to_string(classes) + "}\ndata: {source: imagefolder, path: '" + data.string() +
                               "', image_size: 32, workers: 1}\ntrain: {batch_size: 4}\n"
                               "measure: {warmup_batches: 1, measured_batches: 2, repeats: 2, nvtx: off}\n"
                               "report: {path: '" +
                               (dir / "folder.json").string() + "'}\n" + extra);
  return file.string();
}

// Shared by the tests below: 2 classes x 6 training JPEGs (plus val/), made once.
const fs::path& generated() {
  static const fs::path data = [] {
    const auto dir = tbtest::scratch("e2e-if-data");
    const auto r = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() +
                                   "' --classes 2 --per-class 6 --seed 3");
    INFO(r.output);
    REQUIRE(r.code == 0);
    return dir / "ds";
  }();
  return data;
}

void copy_tree(const fs::path& from, const fs::path& to) { fs::copy(from, to, fs::copy_options::recursive); }

}  // namespace

TEST_CASE("make-dataset imagefolder: ImageNet-like JPEGs in train/ and val/, sizes printed") {
  const auto dir = tbtest::scratch("e2e-if-make");
  const auto r = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() +
                                 "' --classes 3 --per-class 2 --seed 1");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("mean file") != std::string::npos);
  CHECK(fs::exists(dir / "ds/GENERATED"));
  CHECK(fs::exists(dir / "ds/train/class_0002/class_0002_000001.JPEG"));
  CHECK(fs::exists(dir / "ds/val/class_0000/class_0000_000000.JPEG"));
  CHECK_FALSE(fs::exists(dir / "ds.partial"));
  // A second run into the same folder refuses rather than mixing datasets.
  const auto again = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() + "' --classes 1");
  CHECK(again.code == 2);
}

TEST_CASE("bench-data on an image folder: samples/s and where the workers' time goes, per image") {
  const auto dir = tbtest::scratch("e2e-if-bench");
  const auto r = tbtest::run_cli("bench-data --config '" + folder_profile(dir, generated(), 2) + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("per image: read") != std::string::npos);
  const auto j = tbtest::read_json(dir / "folder.bench-data.json");
  CHECK(tbtest::schema_errors(j).empty());
  CHECK(j["context"]["data_generated"] == true);
  CHECK(j["effective"]["decode"] == "host");
  const auto& l = j["results"]["loader"];
  CHECK(l["workers"] == 1);
  for (const char* phase : {"read", "decode", "crop_resize"})
    CHECK(l["per_image_s"][phase]["median"].get<double>() > 0);
  CHECK(l["busy_share"]["median"].get<double>() > 0);
  CHECK(l["skipped_files"].empty());
  // ImageNet's normalisation is the image-folder default.
  CHECK(j["profile"]["resolved"].get<std::string>().find("0.485") != std::string::npos);
  CHECK(j["profile"]["resolved"].get<std::string>().find("max_image_bytes: 268435456") != std::string::npos);
}

TEST_CASE("image folder through the CLI: class count mismatch and a missing root exit 2") {
  const auto dir = tbtest::scratch("e2e-if-classes");
  auto r = tbtest::run_cli("bench-data --config '" + folder_profile(dir, generated(), 5) + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("2 class folders but model.num_classes is 5") != std::string::npos);
  r = tbtest::run_cli("bench-data --config '" + folder_profile(dir, dir / "missing", 2) + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("does not exist") != std::string::npos);
}

TEST_CASE("a bad JPEG mid-run: error exits 2 naming the file, skip counts it in the report and the console") {
  const auto dir = tbtest::scratch("e2e-if-bad");
  copy_tree(generated(), dir / "ds");
  const fs::path bad = dir / "ds/train/class_0001/class_0001_000003.JPEG";
  fs::resize_file(bad, fs::file_size(bad) / 3);  // truncated
  auto r = tbtest::run_cli("bench-data --config '" + folder_profile(dir, dir / "ds", 2) + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find(bad.string() + ": truncated JPEG") != std::string::npos);
  const auto failed = tbtest::read_json(dir / "folder.bench-data.json");
  CHECK(failed["status"] == "error");
  CHECK(failed["error"]["kind"] == "bad_input");

  r = tbtest::run_cli("bench-data --config '" + folder_profile(dir, dir / "ds", 2, "") +
                      "' --set data.on_bad_file=skip");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("skipped " + bad.string()) != std::string::npos);
  CHECK(r.output.find("1 bad file") != std::string::npos);
  const auto j = tbtest::read_json(dir / "folder.bench-data.json");
  REQUIRE(j["results"]["loader"]["skipped_files"].size() == 1);
  CHECK(j["results"]["loader"]["skipped_files"][0]["path"] == bad.string());
  CHECK(j["results"]["loader"]["replaced_samples"].get<int>() >= 1);
}

TEST_CASE("data.decode: device without a GPU falls back to the host, said as ineffective, and --strict refuses") {
  const auto dir = tbtest::scratch("e2e-if-device");
  const auto profile = folder_profile(dir, generated(), 2, "");
  auto r = tbtest::run_cli("bench-data --config '" + profile + "' --set data.decode=device");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "folder.bench-data.json");
  CHECK(j["effective"]["decode"] == "host");
  CHECK(j["results"]["device_decode"].is_null());  // nothing was decoded on a device
  bool noted = false;
  for (const auto& n : j["effective"]["notes"])
    noted = noted || n.get<std::string>().find("data.decode: requested but ineffective") != std::string::npos;
  CHECK(noted);
  r = tbtest::run_cli("bench-data --strict --config '" + profile + "' --set data.decode=device");
  CHECK(r.code == 2);
  CHECK(r.output.find("data.decode") != std::string::npos);
}

TEST_CASE("image-folder keys are validated: split, preprocess, max_image_pixels, max_image_bytes") {
  const auto dir = tbtest::scratch("e2e-if-keys");
  const auto profile = folder_profile(dir, generated(), 2);
  auto r = tbtest::run_cli("validate '" + profile + "'");
  CHECK(r.code == 0);
  r = tbtest::run_cli("bench-data --config '" + profile + "' --set data.split=test");
  CHECK(r.code == 2);
  CHECK(r.output.find("allowed for imagefolder: train, val") != std::string::npos);
  r = tbtest::run_cli("bench-data --config '" + profile + "' --set data.preprocess=device");
  CHECK(r.code == 2);
  CHECK(r.output.find("data.decode: device") != std::string::npos);
  r = tbtest::run_cli("bench-data --config '" + profile + "' --set data.max_image_pixels=0");
  CHECK(r.code == 2);
  r = tbtest::run_cli("bench-data --config '" + profile + "' --set data.max_image_bytes=0");
  CHECK(r.code == 2);
  CHECK(r.output.find("data.max_image_bytes") != std::string::npos);
  r = tbtest::run_cli("bench-data --config '" + profile + "' --set data.split=val --set train.batch_size=2");
  INFO(r.output);
  CHECK(r.code == 0);  // val/ holds one JPEG per class here
}
