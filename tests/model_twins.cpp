#include "model_twins.hpp"

#include <ATen/core/grad_mode.h>

namespace tbtest {

void copy_model_state(trainbench::resnet& from, trainbench::resnet& to) {
  at::NoGradGuard no_grad;
  const auto pf = from->parameters(), pt = to->parameters();
  for (std::size_t i = 0; i < pf.size(); ++i) pt[i].copy_(pf[i]);
  const auto bf = from->buffers(), bt = to->buffers();
  for (std::size_t i = 0; i < bf.size(); ++i) bt[i].copy_(bf[i]);
}

}  // namespace tbtest
