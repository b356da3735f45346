#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <set>

#include "helpers.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/weights.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;

TEST_CASE("ResNet-18 has torchvision's parameter counts") {
  resnet m1000 = make_resnet("resnet18", 1000), m10 = make_resnet("resnet18", 10);
  CHECK(parameter_count(*m1000) == 11689512);
  CHECK(parameter_count(*m10) == 11181642);
}

TEST_CASE("ResNet-18 state-dict keys equal torchvision's") {
  std::set<std::string> expected;
  std::ifstream in(tbtest::source_dir() / "tests/fixtures/resnet18_state_dict_keys.txt");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) expected.insert(line);
  REQUIRE(expected.size() == 122);
  resnet m = make_resnet("resnet18", 10);
  std::set<std::string> actual;
  for (const auto& p : m->named_parameters()) actual.insert(p.key());
  for (const auto& b : m->named_buffers()) actual.insert(b.key());
  CHECK(actual == expected);
  CHECK(actual.count("layer2.0.downsample.1.running_var") == 1);
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
