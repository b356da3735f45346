#pragma once
// For the tests that hold one way of training a model against another: the second model starts
// from the first's numbers, copied, not drawn again.
#include "trainbench/model/resnet.hpp"

namespace tbtest {

// Copies from's parameters and buffers (batch-norm statistics and counts) into to, a model of the
// same architecture, in place: to's tensors keep their device, dtype and memory format.
void copy_model_state(trainbench::resnet& from, trainbench::resnet& to);

// ||a - b|| / ||b|| in float64 on the CPU (||a - b|| where b is zero): one number per tensor,
// robust to a lone element whose ReLU went the other way by rounding.
double relative(const at::Tensor& a, const at::Tensor& b);

// Catch2 checks that every buffer of a is b's of the same name: running statistics within tol
// (relative), batch counters equal.
void check_buffers_close(trainbench::resnet& a, trainbench::resnet& b, double tol);

}  // namespace tbtest
