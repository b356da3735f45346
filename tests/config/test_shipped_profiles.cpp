// Profiles that only a GPU host runs, checked on the CPU: the ones the [gpu] tests write, and
// every profile under configs/ against the rules --strict applies on the device it is written
// for. A profile that no longer loads (a key written twice, a renamed key), or that --strict
// would refuse on a GPU, fails here in CI, not first on a GPU host.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <vector>

#include "gpu/gpu_profiles.hpp"
#include "helpers.hpp"
#include "trainbench/config/effective_rules.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

// Every profile text the [gpu] tests write, with a name for the failure message.
std::vector<std::pair<std::string, std::string>> gpu_test_profiles(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& v : tbgpu::pipeline_variants())
    out.push_back(
        {std::string("pipeline_profile(") + v.data + ", " + v.extra + ")", tbgpu::pipeline_profile(v.data, v.extra)});
  out.push_back({"auto_seed_profile", tbgpu::auto_seed_profile()});
  out.push_back({"second_device_profile", tbgpu::second_device_profile()});
  for (const auto& t : tbgpu::transfer_index_variants())
    out.push_back({"transfer_index_profile(" + t + ")", tbgpu::transfer_index_profile(t)});
  out.push_back({"decode_bench_profile", tbgpu::decode_bench_profile((dir / "folder").string())});
  out.push_back({"trace_profile", tbgpu::trace_profile((dir / "r.json").string())});
  return out;
}

}  // namespace

TEST_CASE("every profile a GPU test writes loads on the CPU") {
  const auto dir = tbtest::scratch("gpu-test-profiles");
  int i = 0;
  for (const auto& [name, yaml] : gpu_test_profiles(dir)) {
    INFO(name << ":\n" << yaml);
    const fs::path file = dir / ("p" + std::to_string(i++) + ".yaml");
    tbtest::write_text(file, yaml);
    CHECK_NOTHROW(load_profile(file));
  }
  // The NCCL test's block after the tiny profile (which has a data block of its own).
  const fs::path tiny = tbtest::tiny_profile(dir, tbgpu::nccl_extra());
  CHECK_NOTHROW(load_profile(tiny));
}

namespace {

// Switches a shipped profile asks for on purpose although they cannot take effect: a ladder rung
// keeps what the rungs before it set. Each entry must still apply (else the test asks to remove it).
struct known_ineffective {
  const char* file;
  const char* key;
};
// None today: data.pin_memory took effect with device decoding (the pinned file ring).
const std::vector<known_ineffective> by_design = {};

std::vector<fs::path> shipped_profiles() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::recursive_directory_iterator(tbtest::source_dir() / "configs"))
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The device a profile is written for: `cpu`, else a CUDA device (`auto` means the GPU when one is there).
device_kind target_device(const profile& p) {
  if (p.device == "cpu") return device_kind{false, "cpu", true};
  return device_kind{true, p.device == "auto" ? "cuda:0" : p.device, true};
}

}  // namespace

TEST_CASE("every shipped profile passes --strict on the device it is written for, checked on the CPU") {
  const auto files = shipped_profiles();
  REQUIRE(files.size() >= 30);
  std::set<std::string> exemptions_used;
  for (const auto& file : files) {
    const std::string rel = fs::relative(file, tbtest::source_dir()).string();
    INFO(rel);
    const profile p = load_profile(file).value;
    for (const auto& s : ineffective_switches(p, target_device(p))) {
      const bool exempt = std::any_of(by_design.begin(), by_design.end(),
                                      [&](const known_ineffective& k) { return rel == k.file && s.key == k.key; });
      if (exempt) {
        exemptions_used.insert(rel + " " + s.key);
        continue;
      }
      FAIL_CHECK(rel << ": --strict refuses '" << s.key << "' on " << target_device(p).name << ": " << s.why);
    }
  }
  for (const auto& k : by_design) {
    INFO("remove the exemption if the switch took effect: " << k.file << " " << k.key);
    CHECK(exemptions_used.count(std::string(k.file) + " " + k.key) == 1);
  }
}

TEST_CASE("the rules of --strict on CUDA, judged on the CPU: a copy stream with pageable memory") {
  profile p;
  p.data.source = data_source::synthetic;
  p.transfer.copy_stream = true;
  const device_kind cuda{true, "cuda:0", true};
  auto keys = [](const std::vector<ineffective_switch>& v) {
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(s.key);
    return out;
  };
  // Loader batches in pageable memory: the copy blocks the host, nothing overlaps.
  CHECK(keys(ineffective_switches(p, cuda)) == std::vector<std::string>{"transfer.copy_stream"});
  p.data.pin_memory = true;
  CHECK(ineffective_switches(p, cuda).empty());
  // nvJPEG on the copy stream decodes one batch ahead with the file bytes in the pinned file ring
  // (the ResNet-50 ladder's 08 rung): both take effect. From pageable memory the copies block.
  p.data.source = data_source::imagefolder;
  p.data.decode = decode_place::device;
  CHECK(ineffective_switches(p, cuda).empty());
  p.data.pin_memory = false;
  CHECK(keys(ineffective_switches(p, cuda)) == std::vector<std::string>{"transfer.copy_stream"});
  // Where nvJPEG cannot run, the host decodes into pageable memory: the copy stream overlaps nothing.
  CHECK(keys(ineffective_switches(p, device_kind{true, "cuda:0", false})) ==
        std::vector<std::string>{"transfer.copy_stream"});
  // On the CPU every CUDA switch is named, with the device.
  const auto cpu = ineffective_switches(p, device_kind{false, "cpu", true});
  REQUIRE(cpu.size() == 1);
  CHECK(cpu[0].why.find("the device is cpu") != std::string::npos);
}

TEST_CASE("backend.fused_batch_norm is judged ineffective without compile, off CUDA, and ex outside fp16") {
  profile p;
  p.backend.fused_batch_norm = fused_bn_route::graph;
  auto why = [](const profile& q, const device_kind& d) {
    for (const auto& s : ineffective_switches(q, d))
      if (s.key == "backend.fused_batch_norm") return s.why;
    return std::string();
  };
  const device_kind gpu{true, "cuda:0", true}, cpu{false, "cpu", true};
  CHECK(why(p, gpu).find("backend.compile is off") != std::string::npos);
  p.backend.compile = true;
  CHECK(why(p, gpu).empty());
  CHECK(why(p, cpu).find("the device is cpu") != std::string::npos);
  p.backend.fused_batch_norm = fused_bn_route::ex;
  p.train.amp = amp_mode::bf16;
  CHECK(why(p, gpu).find("fp16 activations only (train.amp: bf16)") != std::string::npos);
  CHECK(fused_batch_norm_route(p) == fused_bn_route::automatic);  // the run takes the default
  p.train.amp = amp_mode::fp16;
  CHECK(why(p, gpu).empty());
  CHECK(fused_batch_norm_route(p) == fused_bn_route::ex);
  p.backend.fused_batch_norm = fused_bn_route::automatic;  // the default is never named
  p.backend.compile = false;
  CHECK(why(p, cpu).empty());
  // Loaded from YAML by its names; another is refused, naming the three.
  const auto dir = tbtest::scratch("fused-bn-route");
  tbtest::write_text(dir / "ex.yaml", "name: ex\nbackend: {compile: true, fused_batch_norm: ex}\n");
  CHECK(load_profile(dir / "ex.yaml").value.backend.fused_batch_norm == fused_bn_route::ex);
  tbtest::write_text(dir / "bad.yaml", "name: bad\nbackend: {fused_batch_norm: mask}\n");
  const auto r = tbtest::run_cli("validate '" + (dir / "bad.yaml").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("backend.fused_batch_norm") != std::string::npos);
  CHECK(r.output.find("auto, graph, ex") != std::string::npos);
}

TEST_CASE("backend.pad_stem takes effect on CUDA with NHWC and tensor-core dtypes only, and says why elsewhere") {
  profile p;
  p.backend.pad_stem = true;
  auto whys = [](const profile& q, const device_kind& d) {
    std::string all;
    for (const auto& s : ineffective_switches(q, d))
      if (s.key == "backend.pad_stem") all += s.why + "\n";
    return all;
  };
  const device_kind gpu{true, "cuda:0", true}, cpu{false, "cpu", true};
  CHECK_THAT(whys(p, gpu), Catch::Contains("NHWC") && Catch::Contains("tensor-core"));
  CHECK_FALSE(takes_effect(p, gpu, "backend.pad_stem"));
  p.backend.compile = true;  // NHWC, whatever model.channels_last says
  CHECK_THAT(whys(p, gpu), !Catch::Contains("NHWC") && Catch::Contains("backend.tf32"));
  p.backend.tf32 = true;  // fp32 on TF32 tensor cores
  CHECK(takes_effect(p, gpu, "backend.pad_stem"));
  p.backend.tf32 = false;
  for (const auto amp : {amp_mode::fp16, amp_mode::bf16}) {
    p.train.amp = amp;
    CHECK(whys(p, gpu).empty());
    CHECK(takes_effect(p, gpu, "backend.pad_stem"));
    CHECK_THAT(whys(p, cpu), Catch::Contains("the device is cpu"));
    CHECK_FALSE(takes_effect(p, cpu, "backend.pad_stem"));
  }
  p.backend.compile = false;
  p.model.channels_last = true;
  CHECK(takes_effect(p, gpu, "backend.pad_stem"));
  p.backend.pad_stem = false;  // never named when not asked for
  p.model.channels_last = false;
  p.train.amp = amp_mode::off;
  CHECK(whys(p, gpu).empty());
  CHECK(whys(p, cpu).empty());
  const auto dir = tbtest::scratch("pad-stem-key");
  tbtest::write_text(dir / "p.yaml", "name: p\nbackend: {pad_stem: true}\n");
  CHECK(load_profile(dir / "p.yaml").value.backend.pad_stem);
  CHECK_THAT(to_yaml(load_profile(dir / "p.yaml").value), Catch::Contains("pad_stem: true"));
}

TEST_CASE("backend.conv_fusion takes effect on CUDA in NHWC only, and says why elsewhere") {
  profile p;
  p.backend.conv_fusion = true;
  auto whys = [](const profile& q, const device_kind& d) {
    std::string all;
    for (const auto& s : ineffective_switches(q, d))
      if (s.key == "backend.conv_fusion") all += s.why + "\n";
    return all;
  };
  const device_kind gpu{true, "cuda:0", true}, cpu{false, "cpu", true};
  CHECK_THAT(whys(p, gpu), Catch::Contains("NHWC") && Catch::Contains("model.channels_last"));
  CHECK_FALSE(takes_effect(p, gpu, "backend.conv_fusion"));
  p.backend.compile = true;  // NHWC, whatever model.channels_last says
  CHECK(takes_effect(p, gpu, "backend.conv_fusion"));
  p.backend.compile = false;
  p.model.channels_last = true;
  CHECK(takes_effect(p, gpu, "backend.conv_fusion"));
  CHECK_THAT(whys(p, cpu), Catch::Contains("the device is cpu"));
  p.backend.conv_fusion = false;  // never named when not asked for
  p.model.channels_last = false;
  CHECK(whys(p, gpu).empty());
  CHECK(whys(p, cpu).empty());
  const auto dir = tbtest::scratch("conv-fusion-key");
  tbtest::write_text(dir / "p.yaml", "name: p\nbackend: {conv_fusion: true}\n");
  CHECK(load_profile(dir / "p.yaml").value.backend.conv_fusion);
  CHECK_THAT(to_yaml(load_profile(dir / "p.yaml").value), Catch::Contains("conv_fusion: true"));
  // A CPU run goes on unfused, with the note, and its report says nothing ran fused.
  const auto out = dir / "r.json";
  const auto r = tbtest::run_cli(
      "run --quiet --config configs/quickstart.yaml --set device=cpu --set backend.conv_fusion=true "
      "--set measure.warmup_batches=1 --set measure.measured_batches=1 --set measure.repeats=1 --out '" +
      out.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(out);
  CHECK(j["effective"]["conv_fusion"].empty());
  CHECK_THAT(j["effective"]["notes"].dump(),
             Catch::Contains("backend.conv_fusion: requested but ineffective: the device is cpu"));
}

TEST_CASE("data.decode_off_engines: device is judged ineffective where nvJPEG does not decode") {
  profile p;
  p.data.source = data_source::imagefolder;
  p.data.decode = decode_place::device;
  p.data.decode_off_engines = decode_place::device;
  auto named = [](const std::vector<ineffective_switch>& v) {
    for (const auto& s : v)
      if (s.key == "data.decode_off_engines") return true;
    return false;
  };
  CHECK_FALSE(named(ineffective_switches(p, device_kind{true, "cuda:0", true})));
  CHECK(named(ineffective_switches(p, device_kind{true, "cuda:0", false})));  // no libnvjpeg
  CHECK(named(ineffective_switches(p, device_kind{false, "cpu", true})));
  p.data.decode = decode_place::host;
  CHECK(named(ineffective_switches(p, device_kind{true, "cuda:0", true})));
  p.data.decode_off_engines = decode_place::host;  // the default is never named
  CHECK_FALSE(named(ineffective_switches(p, device_kind{true, "cuda:0", true})));
}

TEST_CASE("data.device_decode_share is judged ineffective where the workers do not decode for nvJPEG") {
  profile p;
  p.data.source = data_source::imagefolder;
  p.data.decode = decode_place::device;
  p.data.device_decode_share = 0.65;
  auto why = [](const profile& q, const device_kind& d) {
    for (const auto& s : ineffective_switches(q, d))
      if (s.key == "data.device_decode_share") return s.why;
    return std::string();
  };
  const device_kind gpu{true, "cuda:0", true};
  CHECK(why(p, gpu).empty());
  CHECK_THAT(why(p, device_kind{true, "cuda:0", false}), Catch::Contains("nvJPEG does not decode here"));
  CHECK_THAT(why(p, device_kind{false, "cpu", true}), Catch::Contains("nvJPEG does not decode here"));
  p.data.decode_off_engines = decode_place::device;
  CHECK_THAT(why(p, gpu), Catch::Contains("decode_off_engines: host"));
  p.data.decode_off_engines = decode_place::host;
  p.data.decode = decode_place::host;
  CHECK_THAT(why(p, gpu), Catch::Contains("nvJPEG does not decode here"));
  p.data.device_decode_share = 1;  // the default is never named
  CHECK(why(p, gpu).empty());
  const auto dir = tbtest::scratch("device-decode-share-key");
  tbtest::write_text(dir / "p.yaml", "name: p\ndata: {device_decode_share: 0.65}\n");
  CHECK(load_profile(dir / "p.yaml").value.data.device_decode_share == 0.65);
  CHECK_THAT(to_yaml(load_profile(dir / "p.yaml").value), Catch::Contains("device_decode_share: 0.65"));
}
