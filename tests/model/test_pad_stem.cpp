// backend.pad_stem on the CPU: the padded stem computes the model's own training step (the
// padded channel adds exact zeros), it really runs a 4-channel convolution, and a run off CUDA
// reports the switch ineffective. Its speed is for a GPU: tests/gpu/test_gpu_compile.cpp.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/optim/sgd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "model_twins.hpp"
#include "trainbench/model/resnet.hpp"

using namespace trainbench;

namespace {

// Two resnet18s with the same weights and statistics, in the memory format and dtype given
// (float64 by default: no rounding to tell apart), in training mode; the first with its stem padded.
std::pair<resnet, resnet> twins(at::MemoryFormat format, at::ScalarType dtype = at::kDouble) {
  at::manual_seed(11);
  resnet padded = make_resnet("resnet18", 10), plain = make_resnet("resnet18", 10);
  for (resnet* m : {&padded, &plain}) {
    (*m)->to(dtype);
    (*m)->train();
    if (format == at::MemoryFormat::ChannelsLast) weights_to_channels_last(**m);
  }
  tbtest::copy_model_state(padded, plain);
  padded->set_stem_padded(true);
  return {padded, plain};
}

using tbtest::relative;

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
    tbtest::check_buffers_close(padded, plain, 1e-10);
  }
}

namespace {

// What the first convolution of a forward gets: input and weight channels, the input's dtype and
// whether it is NHWC.
struct stem_call {
  std::int64_t input_channels = 0, weight_channels = 0;
  at::ScalarType dtype = at::kFloat;
  bool nhwc = false;
  std::size_t convolutions = 0;  // in the whole forward
  std::size_t padded_batch_casts = 0;  // dtype casts of a 4-channel tensor of the batch's N
};

stem_call first_convolution(resnet& m, const at::Tensor& x) {
  static thread_local std::vector<stem_call> seen;
  static thread_local std::vector<std::vector<std::int64_t>> casts;  // the shapes autocast or .to() cast
  seen.clear();
  casts.clear();
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(fn.name()) == "aten::_to_copy") casts.push_back(fn.inputs()[0].toTensor().sizes().vec());
        if (std::string(fn.name()) == "aten::convolution") {
          const at::Tensor in = fn.inputs()[0].toTensor(), w = fn.inputs()[1].toTensor();
          seen.push_back({in.size(1), w.size(1), in.scalar_type(),
                          in.is_contiguous(at::MemoryFormat::ChannelsLast) && !in.is_contiguous()});
        }
        return nullptr;
      }).needsInputs(true));
  {
    at::NoGradGuard no_grad;
    m->forward(x);
  }
  at::removeCallback(handle);
  REQUIRE_FALSE(seen.empty());
  stem_call first = seen.front();
  first.convolutions = seen.size();
  for (const auto& s : casts) first.padded_batch_casts += s.size() == 4 && s[0] == x.size(0) && s[1] == 4 ? 1 : 0;
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i].input_channels >= 64);  // the rest is the model's
  return first;
}

}  // namespace

TEST_CASE("the padded stem runs a convolution on 4 channels of input and weights, the plain one on 3") {
  auto [padded, plain] = twins(at::MemoryFormat::ChannelsLast);
  const at::Tensor x = at::randn({2, 3, 32, 32}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast);
  const stem_call p = first_convolution(padded, x), q = first_convolution(plain, x);
  CHECK(p.input_channels == 4);
  CHECK(p.weight_channels == 4);
  CHECK(q.input_channels == 3);
  CHECK(q.weight_channels == 3);
  CHECK(p.nhwc);  // the padded copy keeps the batch's layout
  CHECK(p.convolutions == q.convolutions);
}

TEST_CASE("under autocast the padded stem casts the batch into its padded copy: the convolution gets bf16 on 4 channels") {
  auto [padded, plain] = twins(at::MemoryFormat::ChannelsLast, at::kFloat);
  padded->eval();
  plain->eval();
  const at::Tensor x = at::randn({2, 3, 32, 32}).contiguous(at::MemoryFormat::ChannelsLast);
  const bool was = at::autocast::is_autocast_enabled(at::kCPU);
  const at::ScalarType was_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const stem_call p = first_convolution(padded, x);
  at::Tensor out_padded, out_plain;
  {
    at::NoGradGuard no_grad;
    out_padded = padded->forward(x).to(at::kFloat);
    out_plain = plain->forward(x).to(at::kFloat);
  }
  at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCPU, was);
  at::autocast::set_autocast_dtype(at::kCPU, was_dtype);
  CHECK(p.input_channels == 4);
  CHECK(p.dtype == at::kBFloat16);
  CHECK(p.nhwc);
  CHECK(p.padded_batch_casts == 0);  // the batch was cast as it was copied, not padded in float and cast again
  // The same bf16 batch either way (the cast rounds as autocast's does); the convolutions may sum
  // in another order, so the logits agree to bf16's precision, not bit for bit.
  CHECK(relative(out_padded, out_plain) < 2e-2);
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
