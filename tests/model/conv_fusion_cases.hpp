#pragma once
// The convolution-fusion problems the CPU and GPU tests share: a square image and filter.
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "trainbench/model/conv_fusion.hpp"

namespace tbtest {

struct conv_case {
  std::int64_t c, h, k, r, stride, padding;  // input channels and side, output channels, filter side
};

inline trainbench::conv_fusion_shape conv_fusion_shape_of(const conv_case& g, at::ScalarType dtype, std::int64_t n) {
  trainbench::conv_fusion_shape s;
  s.dtype = dtype;
  s.n = n;
  s.c = g.c;
  s.h = s.w = g.h;
  s.k = g.k;
  s.r = g.r;
  s.g = {g.stride, g.padding};
  return s;
}

}  // namespace tbtest
