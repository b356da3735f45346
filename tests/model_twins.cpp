#include "model_twins.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <catch2/catch.hpp>

namespace tbtest {

void copy_model_state(trainbench::resnet& from, trainbench::resnet& to) {
  at::NoGradGuard no_grad;
  const auto pf = from->parameters(), pt = to->parameters();
  for (std::size_t i = 0; i < pf.size(); ++i) pt[i].copy_(pf[i]);
  const auto bf = from->buffers(), bt = to->buffers();
  for (std::size_t i = 0; i < bf.size(); ++i) bt[i].copy_(bf[i]);
}

double relative(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.detach().to(at::kCPU, at::kDouble), y = b.detach().to(at::kCPU, at::kDouble);
  const double norm = y.norm().item<double>();
  return (x - y).norm().item<double>() / (norm > 0 ? norm : 1.0);
}

void check_buffers_close(trainbench::resnet& a, trainbench::resnet& b, double tol) {
  const auto ba = a->named_buffers(), bb = b->named_buffers();
  for (const auto& item : ba) {
    INFO(item.key());
    if (item.value().is_floating_point())
      CHECK(relative(item.value(), bb[item.key()]) < tol);
    else
      CHECK(at::equal(item.value().cpu(), bb[item.key()].cpu()));  // num_batches_tracked
  }
}

}  // namespace tbtest
