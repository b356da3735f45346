#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "helpers.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/train_step.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;

namespace {

// torchvision 0.26: parameters at 1000 and 10 classes, and torch.utils.flop_counter's forward
// FLOPs per sample at 224 and 64 px (1000 classes); the weights' documented GFLOPS (`_ops`) are
// half the 224 px figure, rounded.
struct torchvision_figures {
  const char* arch;
  std::int64_t parameters_1000, parameters_10;
  double flops_224, flops_64, documented_gmacs;
};
const torchvision_figures figures[] = {
    {"resnet18", 11689512, 11181642, 3628146688, 297115648, 1.814},
    {"resnet34", 21797672, 21289802, 7327522816, 599105536, 3.664},
    {"resnet50", 25557032, 23528522, 8178368512, 671383552, 4.089},
    {"resnet101", 44549160, 42520650, 15602810880, 1277460480, 7.801},
    {"resnet152", 60192808, 58164298, 23027253248, 1883537408, 11.514},
    {"resnext50_32x4d", 25028904, 23000394, 8460959744, 694452224, 4.23},
    {"resnext101_32x8d", 88791336, 86762826, 32828030976, 2683600896, 16.414},
    {"resnext101_64x4d", 83455272, 81426762, 30920540160, 2527887360, 15.46},
    {"wide_resnet50_2", 68883240, 66854730, 22796042240, 1864663040, 11.398},
    {"wide_resnet101_2", 126886696, 124858186, 45506101248, 3718545408, 22.753},
};

std::set<std::string> state_keys(resnet& m) {
  std::set<std::string> out;
  for (const auto& p : m->named_parameters()) out.insert(p.key());
  for (const auto& b : m->named_buffers()) out.insert(b.key());
  return out;
}

std::set<std::string> fixture_keys(const std::string& file) {
  std::set<std::string> out;
  std::ifstream in(tbtest::source_dir() / "tests/fixtures" / file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.insert(line);
  return out;
}

}  // namespace

TEST_CASE("every architecture: torchvision's parameter count and shapes") {
  REQUIRE(model_arch_names().size() == std::size(figures));
  // Each model's layer4.0.conv2 (the grouped 3x3 where there is one) and fc, as torchvision's.
  const std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> shapes = {
      {"resnet18", {{512, 512, 3, 3}, {1000, 512}}},           {"resnet50", {{512, 512, 3, 3}, {1000, 2048}}},
      {"resnext50_32x4d", {{1024, 32, 3, 3}, {1000, 2048}}},    // 32 groups of 32
      {"resnext101_64x4d", {{2048, 32, 3, 3}, {1000, 2048}}},   // 64 groups of 32
      {"wide_resnet50_2", {{1024, 1024, 3, 3}, {1000, 2048}}},  // twice the bottleneck width
  };
  for (const auto& f : figures) {
    INFO(f.arch);
    CHECK(find_resnet_spec(f.arch) != nullptr);
    resnet m = make_resnet(f.arch, 1000);
    CHECK(parameter_count(*m) == f.parameters_1000);
    CHECK(m->name() == f.arch);
    const auto it = shapes.find(f.arch);
    if (it != shapes.end()) {
      const auto params = m->named_parameters();
      CHECK(params["layer4.0.conv2.weight"].sizes().vec() == it->second.first);
      CHECK(params["fc.weight"].sizes().vec() == it->second.second);
    }
  }
  CHECK(parameter_count(*make_resnet("resnet18", 10)) == 11181642);
  CHECK(parameter_count(*make_resnet("resnext50_32x4d", 10)) == 23000394);
}

// One model per block structure (basic, bottleneck, grouped, wide): the deeper members differ
// only in block counts, and a step of all ten would cost minutes of CI on two cores.
TEST_CASE("each block structure trains: one SGD step on the CPU moves every parameter") {
  for (const char* arch : {"resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2"}) {
    INFO(arch);
    resnet m = make_resnet(arch, 10);
    step_options o;
    o.optimizer.lr = 0.01;
    o.optimizer.foreach = true;
    auto step = make_eager_step(m, o);
    std::vector<at::Tensor> before;
    for (const auto& p : m->parameters()) before.push_back(p.detach().clone());
    at::manual_seed(1);
    step->forward({at::randn({2, 3, 32, 32}), at::randint(10, {2}, at::kLong), 0, 2});
    step->backward();
    step->optimizer_step();
    CHECK(std::isfinite(step->last_loss().item<double>()));
    std::size_t unmoved = 0;
    const auto after = m->parameters();
    for (std::size_t i = 0; i < before.size(); ++i) unmoved += at::equal(before[i], after[i]);
    CHECK(unmoved == 0);
  }
}

TEST_CASE("forward FLOPs from the layer shapes equal torch's flop counter and torchvision's documented GFLOPS") {
  for (const auto& f : figures) {
    INFO(f.arch);
    const resnet_spec& spec = *find_resnet_spec(f.arch);
    CHECK(forward_flops(spec, 1000, 224, 224) == f.flops_224);
    CHECK(forward_flops(spec, 1000, 64, 64) == f.flops_64);
    CHECK(std::round(forward_flops(spec, 1000, 224, 224) / 2e6) / 1e3 == Approx(f.documented_gmacs).margin(1e-9));
  }
  // Non-square and odd sizes follow the convolutions' floor rounding: 225 px is 113 after the stem.
  const resnet_spec& r50 = *find_resnet_spec("resnet50");
  CHECK(forward_flops(r50, 1000, 225, 225) > forward_flops(r50, 1000, 224, 224));
  CHECK(forward_flops(r50, 10, 64, 64) < forward_flops(r50, 1000, 64, 64));
}

TEST_CASE("an unknown architecture is refused with the names and a suggestion") {
  try {
    make_resnet("resnet5", 10);
    FAIL("no error");
  } catch (const config_error& e) {
    const std::string msg = e.what();
    CHECK(e.key() == "model.arch");
    CHECK(msg.find("did you mean 'resnet50'") != std::string::npos);
    CHECK(msg.find("resnext101_64x4d") != std::string::npos);
    CHECK(msg.find("wide_resnet101_2") != std::string::npos);
  }
  CHECK(unknown_arch_message("vgg16").find("did you mean") == std::string::npos);
}

TEST_CASE("state-dict keys equal torchvision's: ResNet-18 (basic blocks) and ResNet-50 (bottlenecks)") {
  const auto expected18 = fixture_keys("resnet18_state_dict_keys.txt");
  REQUIRE(expected18.size() == 122);
  resnet m18 = make_resnet("resnet18", 10);
  CHECK(state_keys(m18) == expected18);
  CHECK(expected18.count("layer2.0.downsample.1.running_var") == 1);

  const auto expected50 = fixture_keys("resnet50_state_dict_keys.txt");
  REQUIRE(expected50.size() == 320);
  CHECK(expected50.count("layer1.0.downsample.0.weight") == 1);  // 64 -> 256 channels at stride 1
  for (const char* arch : {"resnet50", "resnext50_32x4d"}) {
    INFO(arch);
    resnet m = make_resnet(arch, 10);
    CHECK(state_keys(m) == expected50);
  }
}

TEST_CASE("a ResNet-50 forward: stride 2 on the bottleneck's 3x3 halves the map there and in the downsample") {
  at::manual_seed(0);
  resnet m = make_resnet("resnet50", 10);
  m->eval();
  at::NoGradGuard g;
  CHECK(m->forward(at::randn({1, 3, 64, 64})).sizes() == at::IntArrayRef({1, 10}));
  const auto params = m->named_parameters();
  CHECK(params["layer2.0.conv1.weight"].sizes() == at::IntArrayRef({128, 256, 1, 1}));
  CHECK(params["layer2.0.conv2.weight"].sizes() == at::IntArrayRef({128, 128, 3, 3}));
  CHECK(params["layer2.0.downsample.0.weight"].sizes() == at::IntArrayRef({512, 256, 1, 1}));
}

TEST_CASE("zero_init_residual zeroes the last batch norm of every residual branch, as torchvision") {
  resnet r18 = make_resnet("resnet18", 10, true), r50 = make_resnet("resnet50", 10, true);
  int zeroed = 0;
  for (const auto& p : r18->named_parameters()) {
    const bool last_bn = p.key().find(".bn2.weight") != std::string::npos;
    if (p.key().rfind("layer", 0) == 0 && p.key().find(".bn") != std::string::npos &&
        p.key().find(".weight") != std::string::npos) {
      INFO(p.key());
      CHECK(p.value().eq(last_bn ? 0 : 1).all().item<bool>());
      zeroed += last_bn;
    }
  }
  CHECK(zeroed == 8);  // one per basic block
  zeroed = 0;
  for (const auto& p : r50->named_parameters()) {
    if (p.key().find(".bn3.weight") != std::string::npos) {
      CHECK(p.value().eq(0).all().item<bool>());
      ++zeroed;
    }
    if (p.key().find(".bn2.weight") != std::string::npos) CHECK(p.value().eq(1).all().item<bool>());
    if (p.key().find("downsample.1.weight") != std::string::npos) CHECK(p.value().eq(1).all().item<bool>());
  }
  CHECK(zeroed == 16);  // one per bottleneck
  resnet plain = make_resnet("resnet50", 10);
  CHECK(plain->named_parameters()["layer1.0.bn3.weight"].eq(1).all().item<bool>());
}

TEST_CASE("torchvision's init: BN weight 1 and bias 0, conv fan-out std") {
  at::manual_seed(0);
  resnet m = make_resnet("resnet18", 10);
  for (const auto& p : m->named_parameters()) {
    if (p.key() == "bn1.weight") CHECK(p.value().eq(1).all().item<bool>());
    if (p.key() == "bn1.bias") CHECK(p.value().eq(0).all().item<bool>());
    if (p.key() == "layer1.0.conv1.weight") {
      // kaiming normal, fan_out = 64 * 3 * 3, gain sqrt(2)
      CHECK(p.value().std().item<double>() == Approx(std::sqrt(2.0 / 576.0)).epsilon(0.05));
    }
  }
  const auto out = m->forward(at::randn({2, 3, 32, 32}));
  CHECK(out.sizes() == at::IntArrayRef({2, 10}));
}

TEST_CASE("weights: save and load round trip, mismatches are listed") {
  const auto dir = tbtest::scratch("weights");
  at::manual_seed(1);
  resnet a = make_resnet("resnet18", 10);
  save_weights(*a, dir / "w.pt");
  at::manual_seed(2);
  resnet b = make_resnet("resnet18", 10);
  load_weights(*b, dir / "w.pt");
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& p : pa) CHECK(at::equal(p.value(), pb[p.key()]));

  resnet other = make_resnet("resnet18", 7);  // fc has 7 outputs: mis-shaped keys
  try {
    load_weights(*other, dir / "w.pt");
    FAIL("no error");
  } catch (const input_error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("mis-shaped keys: fc.bias [10] vs [7]") != std::string::npos);
    CHECK(msg.find("fc.weight") != std::string::npos);
  }
  tbtest::write_text(dir / "junk.pt", "not a pickle");
  CHECK_THROWS_AS(load_weights(*b, dir / "junk.pt"), input_error);
}

TEST_CASE("weights of another architecture: missing, unexpected and mis-shaped keys, named") {
  const auto dir = tbtest::scratch("weights-arch");
  save_weights(*make_resnet("resnet18", 10), dir / "r18.pt");
  save_weights(*make_resnet("resnet50", 10), dir / "r50.pt");
  auto message = [](resnet m, const std::filesystem::path& file) {
    try {
      load_weights(*m, file);
    } catch (const input_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string deeper = message(make_resnet("resnet34", 10), dir / "r18.pt");
  CHECK(deeper.find("does not match resnet34") != std::string::npos);
  CHECK(deeper.find("missing keys: ") != std::string::npos);
  CHECK(deeper.find("layer1.2.conv1.weight") != std::string::npos);
  const std::string grouped = message(make_resnet("resnext50_32x4d", 10), dir / "r50.pt");
  CHECK(grouped.find("mis-shaped keys: ") != std::string::npos);
  CHECK(grouped.find("layer1.0.conv1.weight [64, 64, 1, 1] vs [128, 64, 1, 1]") != std::string::npos);
  const std::string basic = message(make_resnet("resnet18", 10), dir / "r50.pt");
  CHECK(basic.find("unexpected keys: ") != std::string::npos);
  CHECK(basic.find("layer1.0.bn3.weight") != std::string::npos);
}
