#include "model_twins.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

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

}  // namespace tbtest
