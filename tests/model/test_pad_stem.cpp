// backend.pad_stem on the CPU: the padded stem computes the model's own training step (the
// padded channel adds exact zeros), it really runs a 4-channel convolution, and a run off CUDA
// reports the switch ineffective. Its speed is for a GPU: tests/gpu/test_gpu_compile.cpp.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/optim/sgd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "trainbench/model/resnet.hpp"

using namespace trainbench;

namespace {

// Two resnet18s with the same weights and statistics, in float64 (no rounding to tell apart), in
// the memory format given; the first with its stem padded.
std::pair<resnet, resnet> twins(at::MemoryFormat format) {
  at::manual_seed(11);
  resnet padded = make_resnet("resnet18", 10), plain = make_resnet("resnet18", 10);
  for (resnet* m : {&padded, &plain}) {
    (*m)->to(at::kDouble);
    (*m)->train();
  }
  at::NoGradGuard no_grad;
  auto a = padded->parameters(), b = plain->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    b[i].copy_(a[i]);
    if (a[i].dim() == 4) {
      a[i].set_data(a[i].data().contiguous(format));
      b[i].set_data(b[i].data().contiguous(format));
    }
  }
  auto ba = padded->buffers(), bb = plain->buffers();
  for (std::size_t i = 0; i < ba.size(); ++i) bb[i].copy_(ba[i]);
  padded->set_stem_padded(true);
  return {padded, plain};
}

double relative(const at::Tensor& a, const at::Tensor& b) {
  const double norm = b.norm().item<double>();
  return (a - b).norm().item<double>() / (norm > 0 ? norm : 1.0);
}

}  // namespace

TEST_CASE("the padded stem trains as the model's own stem: loss, gradients, weights and statistics, NCHW and NHWC") {
  for (const auto format : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    INFO((format == at::MemoryFormat::ChannelsLast ? "NHWC" : "NCHW"));
    auto [padded, plain] = twins(format);
    CHECK(padded->stem_padded());
    CHECK_FALSE(plain->stem_padded());
    // The parameter stays 3 channels: the state dict, the optimizer and the count are the model's.
    CHECK(parameter_count(*padded) == parameter_count(*plain));
    CHECK(padded->named_parameters()["conv1.weight"].sizes() == at::IntArrayRef({64, 3, 7, 7}));
    const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4);
    torch::optim::SGD opt_padded(padded->parameters(), sgd), opt_plain(plain->parameters(), sgd);
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      at::manual_seed(100 + step);
      const at::Tensor x = at::randn({4, 3, 40, 40}, at::kDouble).contiguous(format);
      const at::Tensor y = at::randint(10, {4}, at::kLong);
      opt_padded.zero_grad();
      opt_plain.zero_grad();
      const at::Tensor loss_padded = at::cross_entropy_loss(padded->forward(x), y);
      const at::Tensor loss_plain = at::cross_entropy_loss(plain->forward(x), y);
      loss_padded.backward();
      loss_plain.backward();
      CHECK(std::abs(loss_padded.item<double>() - loss_plain.item<double>()) <=
            1e-12 * std::abs(loss_plain.item<double>()));
      const auto gp = padded->named_parameters(), gq = plain->named_parameters();
      for (const auto& kv : gp) {
        INFO(kv.key());
        REQUIRE(kv.value().grad().defined());
        CHECK(kv.value().grad().sizes() == gq[kv.key()].grad().sizes());
        CHECK(relative(kv.value().grad(), gq[kv.key()].grad()) < 1e-10);
      }
      opt_padded.step();
      opt_plain.step();
    }
    const auto pp = padded->named_parameters(), pq = plain->named_parameters();
    for (const auto& kv : pp) {
      INFO(kv.key());
      CHECK(relative(kv.value(), pq[kv.key()]) < 1e-10);
    }
    const auto bp = padded->named_buffers(), bq = plain->named_buffers();
    for (const auto& kv : bp) {
      INFO(kv.key());
      CHECK(relative(kv.value().to(at::kDouble), bq[kv.key()].to(at::kDouble)) < 1e-10);
    }
  }
}

TEST_CASE("the padded stem runs a convolution on 4 channels of input and weights, the plain one on 3") {
  auto [padded, plain] = twins(at::MemoryFormat::ChannelsLast);
  for (resnet* m : {&padded, &plain}) {
    const bool pad = (*m)->stem_padded();
    INFO((pad ? "padded" : "plain"));
    // The input and weight channels of every convolution the forward runs, in call order.
    static thread_local std::vector<std::pair<std::int64_t, std::int64_t>> seen;
    seen.clear();
    const auto handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (std::string(fn.name()) == "aten::convolution") {
            const auto in = fn.inputs();
            seen.emplace_back(in[0].toTensor().size(1), in[1].toTensor().size(1));
          }
          return nullptr;
        }).needsInputs(true));
    {
      at::NoGradGuard no_grad;
      (*m)->forward(at::randn({2, 3, 32, 32}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast));
    }
    at::removeCallback(handle);
    REQUIRE_FALSE(seen.empty());
    CHECK(seen.front().first == (pad ? 4 : 3));
    CHECK(seen.front().second == (pad ? 4 : 3));
    for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].first >= 64);  // the rest is the model's
  }
}

TEST_CASE("run with backend.pad_stem on the CPU: the switch is reported ineffective, and --strict refuses it") {
  const auto dir = tbtest::scratch("pad-stem-cpu");
  const auto file = tbtest::tiny_profile(dir, "backend: {pad_stem: true}\n");
  const auto r = tbtest::run_cli("run --quiet --config '" + file + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["effective"]["pad_stem"] == false);
  bool noted = false;
  for (const auto& n : j["effective"]["notes"])
    noted = noted || n.get<std::string>().rfind("backend.pad_stem: requested but ineffective: the device is cpu", 0) == 0;
  CHECK(noted);
  CHECK(tbtest::schema_errors(j).empty());
  const auto strict = tbtest::run_cli("run --strict --quiet --config '" + file + "'");
  CHECK(strict.code == 2);
  CHECK_THAT(strict.output, Catch::Contains("backend.pad_stem"));
}
